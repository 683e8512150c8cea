"""HTML to text now lives in agentd.parsing (bounded, linear-time); this name stays for callers."""

from agentd.parsing.html_text import HtmlText, HtmlTooHard, html_to_text, html_to_text_bounded

__all__ = ["HtmlText", "HtmlTooHard", "html_to_text", "html_to_text_bounded"]
