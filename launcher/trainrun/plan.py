"""A Plan is everything a launch does: one argv, the env it adds, and the Spark conf it applies."""
from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Plan:
    backend: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    spark_conf: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"backend": self.backend, "argv": list(self.argv), "env": dict(sorted(self.env.items())),
                "spark_conf": dict(sorted(self.spark_conf.items()))}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"

    def to_text(self) -> str:
        lines = [f"backend: {self.backend}", f"argv: {shlex.join(self.argv)}", "env:"]
        lines += [f"  {k}={v}" for k, v in sorted(self.env.items())] or ["  (none)"]
        if self.spark_conf:
            lines.append("spark conf:")
            lines += [f"  {k}={v}" for k, v in sorted(self.spark_conf.items())]
        return "\n".join(lines) + "\n"
