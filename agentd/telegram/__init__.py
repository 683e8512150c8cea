"""Telegram: update intake, classification and output. Only this package imports aiogram."""
