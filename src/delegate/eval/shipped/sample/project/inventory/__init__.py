"""A tiny stock keeper for a fruit shop."""
