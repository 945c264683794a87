"""Pydantic wire models shared by every layer. No I/O here."""
