"""The YAML-subset reader lives in exporter.sim.yamlsubset (the local chain rewrites copies of
the shipped rule files with it); the rule tests import it from here."""

from exporter.sim.yamlsubset import Plain, YamlSubsetError, loads, resolve

__all__ = ["Plain", "YamlSubsetError", "loads", "resolve"]
