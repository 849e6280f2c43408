"""Presentation: tables and JSON on stdout, talk on stderr."""
