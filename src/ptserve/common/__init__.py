"""Shared types and tables: the bottom layer, imported by every other one."""
