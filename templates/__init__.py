"""Jinja job templates shipped with scalestudy (one per scheduler)."""
