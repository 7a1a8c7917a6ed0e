"""The storage failures users met (issue 31, decision D20): one module per failure."""
