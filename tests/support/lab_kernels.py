"""A JupyterLab server's kernels driven as its pages drive them: the URL it prints with its token, its REST API, and a
kernel's websocket channel (the image's JupyterLab, tests/image/test_lab.py; one on a Slurm allocation's first node,
tests/integration/test_slurm.py)."""
from __future__ import annotations

import asyncio
import json
import uuid

import requests
import tornado.websocket


def base(url: str) -> str:
    return url.split("/lab?")[0]


def token_of(url: str) -> str:
    return url.split("token=")[1]


def with_token(url: str) -> requests.Session:
    session = requests.Session()
    session.headers["Authorization"] = f"token {token_of(url)}"
    return session


def execute(url: str, kernel_id: str, code: str, timeout: float = 60) -> str:
    """Runs `code` in the kernel over its websocket channel (the protocol a notebook page speaks); its stdout."""
    address = f"{base(url).replace('http://', 'ws://')}/api/kernels/{kernel_id}/channels?token={token_of(url)}"
    msg_id = uuid.uuid4().hex
    request = {"header": {"msg_id": msg_id, "msg_type": "execute_request", "username": "test",
                          "session": uuid.uuid4().hex, "version": "5.3"},
               "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
               "content": {"code": code, "silent": False, "store_history": False, "user_expressions": {},
                           "allow_stdin": False, "stop_on_error": True}}

    async def run() -> str:
        connection = await tornado.websocket.websocket_connect(address, connect_timeout=30)
        await connection.write_message(json.dumps(request))
        out = []
        while True:
            message = json.loads(await asyncio.wait_for(connection.read_message(), timeout))
            if message.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            if message["msg_type"] == "stream":
                out.append(message["content"]["text"])
            elif message["msg_type"] == "error":
                out.append("\n".join(message["content"]["traceback"]))
            elif message["msg_type"] == "status" and message["content"]["execution_state"] == "idle":
                connection.close()
                return "".join(out)

    return asyncio.run(run())
