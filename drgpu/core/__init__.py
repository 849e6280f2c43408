"""The pure functional core: frozen dataclasses in and out, no outside world."""
