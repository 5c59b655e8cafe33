"""The latency dashboard: one local page (served, or exported as one offline HTML file) over the results store.

The command line (`edge-sdk dashboard [--export OUT.html]`) is the CLI package's dashboard module.
"""
from __future__ import annotations

from edge_sdk.dashboard.page import chart_data, export_html, render_page
from edge_sdk.dashboard.server import make_server, serve

__all__ = ["chart_data", "export_html", "render_page", "make_server", "serve"]
