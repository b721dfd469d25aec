"""Serve Magnum's WSGI application (`magnum.wsgi.api`), the way uwsgi or
mod_wsgi deployments run magnum-api: objects are read from and written to
the database directly (no indirection through the conductor), RPC still
goes to the conductor. Run with the magnum-api venv's Python:

    python magnum_api_wsgi.py CONFIG_FILE HOST PORT
"""
import sys

conf, host, port = sys.argv[1:4]
# magnum.wsgi.api reads its configuration from sys.argv when imported.
sys.argv = ["magnum-api", "--config-file", conf]

from magnum.wsgi import api  # noqa: E402
from werkzeug import serving  # noqa: E402

serving.run_simple(host, int(port), api.application, threaded=True)
