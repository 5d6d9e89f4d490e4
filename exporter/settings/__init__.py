"""Settings: the kinds of values (``values``), their declarations (``declare``), and the
configuration reference generated from them (``docs``)."""
