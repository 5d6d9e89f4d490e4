"""Generated CRI v1 stubs (scripts/gen-cri-stubs). Do not edit."""
