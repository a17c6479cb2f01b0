"""Presentation: tables (terminal, Markdown, HTML), plots, the report and compare files."""
