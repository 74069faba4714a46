"""Django-free caption scorers (numpy / scipy only; importing this package must not import Django)."""
