"""The base class of the generated operations: it hands each one to a jobgate Transport.

ariadne-codegen copies this file into the generated package, so it stays a thin seam: every
decision (HTTP, WebSocket, errors, retries) lives in ``jobgate._transport``.
"""

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:
    from jobgate._transport import Transport


class BaseClient:
    """Generated operations call these three methods; the transport does the work."""

    def __init__(self, transport: "Transport") -> None:
        self.transport = transport

    async def execute(
        self,
        query: str,
        operation_name: Optional[str] = None,
        variables: Optional[dict[str, Any]] = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        return await self.transport.execute(query, operation_name, variables or {})

    def get_data(self, response: dict[str, Any]) -> dict[str, Any]:
        return response

    def execute_ws(
        self,
        query: str,
        operation_name: Optional[str] = None,
        variables: Optional[dict[str, Any]] = None,
        **kwargs: Any,
    ) -> AsyncIterator[dict[str, Any]]:
        return self.transport.subscribe(query, operation_name, variables or {})
