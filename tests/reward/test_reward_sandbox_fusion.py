"""The SandboxFusion HTTP backend against a local stand-in server speaking its API.

The stand-in runs the (trusted, test-authored) programs with plain subprocess; what is
tested is the client: request format, response handling, comparison, failure mapping.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from reward.code_tests import CodeLimits
from reward.sandbox_fusion import score_code_remote
from reward.score import compute_score

ADD = json.dumps(
    {
        "tests": [
            {"input": "1 2\n", "output": "3\n", "testtype": "stdin"},
            {"input": "2 2\n", "output": "4", "testtype": "stdin"},
        ],
        "fn_name": None,
    }
)
TWO_SUM = json.dumps(
    {"tests": [{"input": "[2,7,11,15]\n9", "output": "[0, 1]", "testtype": "functional"}], "fn_name": "twoSum"}
)
LIMITS = CodeLimits(
    test_timeout_s=4.0, problem_budget_s=30.0
)  # the script imports LiveCodeBench's preamble: slack on a loaded machine


class _StandIn(BaseHTTPRequestHandler):
    requests: list[dict] = []
    fail_with_status: int | None = None

    def do_POST(self):  # noqa: N802 - http.server API
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append(body)
        if type(self).fail_with_status:
            self.send_response(type(self).fail_with_status)
            self.end_headers()
            return
        try:
            done = subprocess.run(
                [sys.executable, "-c", body["code"]],
                input=body["stdin"],
                capture_output=True,
                text=True,
                timeout=body["run_timeout"],
            )
            run = {"status": "Finished", "return_code": done.returncode, "stdout": done.stdout, "stderr": done.stderr}
        except subprocess.TimeoutExpired:
            run = {"status": "TimeLimitExceeded", "return_code": None, "stdout": "", "stderr": ""}
        reply = json.dumps({"status": "Success", "compile_result": None, "run_result": run}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args):
        pass


@pytest.fixture()
def server_url():
    _StandIn.requests = []
    _StandIn.fail_with_status = None
    server = ThreadingHTTPServer(("127.0.0.1", 0), _StandIn)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/run_code"
    server.shutdown()
    server.server_close()


def fenced(code: str) -> str:
    return f"```python\n{code}\n```"


@pytest.mark.parametrize(
    "program, ground_truth, reason",
    [
        ("a, b = map(int, input().split())\nprint(a + b)", ADD, "correct"),
        ("a, b = map(int, input().split())\nprint(a * b + 1)", ADD, "wrong_answer"),
        ("raise SystemExit(3)", ADD, "wrong_answer"),  # SystemExit ends a stdin test normally (LiveCodeBench)
        ("import sys\nprint(sys.stdin.buffer.read())", ADD, "runtime_error"),  # LiveCodeBench's stdin is a StringIO
        (
            "def main():\n    a, b = map(int, input().split())\n    print(a + b)\nif __name__ == '__main__':\n    "
            "main()",
            ADD,
            "correct",
        ),
        ("while True:\n    pass", ADD, "timeout"),
        (
            "class Solution:\n    def twoSum(self, nums, target):\n        print('noise')\n        return (0, 1)",
            TWO_SUM,
            "correct",
        ),
        ("class Solution:\n    def twoSum(self, nums, target):\n        return [1, 0]", TWO_SUM, "wrong_answer"),
        (  # LiveCodeBench's preamble: typing names need no import
            "class Solution:\n    def twoSum(self, nums: List[int], target: int) -> List[int]:\n        return [0, 1]",
            TWO_SUM,
            "correct",
        ),
    ],
)
def test_remote_verdicts(server_url, program, ground_truth, reason):
    verdict = score_code_remote(fenced(program), ground_truth, url=server_url, limits=LIMITS)
    assert verdict.reason == reason
    request = _StandIn.requests[0]
    assert request["language"] == "python" and request["run_timeout"] == LIMITS.test_timeout_s
    assert request["memory_limit_MB"] == LIMITS.memory_mb
    assert set(request) >= {"code", "stdin", "compile_timeout", "files", "fetch_files"}


def test_remote_server_failure_is_a_sandbox_error(server_url):
    _StandIn.fail_with_status = 503
    verdict = score_code_remote(fenced("print(3)"), ADD, url=server_url, limits=LIMITS)
    assert verdict.reason == "sandbox_error" and verdict.credit == 0.0


def test_remote_selected_through_reward_kwargs(server_url):
    result = compute_score(
        "primeintellect",
        fenced("a, b = map(int, input().split())\nprint(a + b if a == 1 else 0)"),
        ADD,
        code_backend="sandbox_fusion",
        sandbox_fusion_url=server_url,
        code_mode="fraction",
    )
    assert result["score"] == 0.5 and result["reason"] == "wrong_answer"
