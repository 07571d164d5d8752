"""The app server's runtime API client as the app server's injector builds it, shared by the
drivers that run it (runtime_client_drive.py, process_sandbox_drive.py)."""

from __future__ import annotations

from openhands.app_server.sandbox.remote_sandbox_service import RemoteSandboxService
from openhands.app_server.user.specifiy_user_context import SpecifyUserContext

# The limit the drivers run with: the scenario of issue 19 starts a fourth sandbox past it.
MAX_SANDBOXES = 3


def remote_sandbox_service(spec_service, *, url, key, client, db, web_url=None):
    """openhands-ai's RemoteSandboxService on Sandgate at `url` with runtime API key `key`,
    for one user, over the httpx `client` and the SQLAlchemy session `db`; with `web_url`,
    its sandboxes post their webhooks to `{web_url}/api/v1/webhooks`."""
    return RemoteSandboxService(
        sandbox_spec_service=spec_service,
        api_url=url,
        api_key=key,
        web_url=web_url,
        resource_factor=1,
        runtime_class=None,
        start_sandbox_timeout=120,
        max_num_sandboxes=MAX_SANDBOXES,
        user_context=SpecifyUserContext(user_id="user-1"),
        httpx_client=client,
        db_session=db,
    )
