"""The README's command that runs a worker without installing the SDK works where it is meant to
be typed (issue 17): in the checkout root, which holds the server's dex.so after a build.  There
`PYTHONPATH=clients/python python3 -m dex worker ...` imported dex.so instead of the SDK ("No
code object available for dex").  The test takes the command from the READMEs, and runs it in a
directory laid out as a built checkout: clients/python (this SDK) and a dex.so."""

import os
import re
import shlex
import subprocess
import sys

import pytest

from conftest import stop_with_sigterm, worker_process

HERE = os.path.dirname(os.path.abspath(__file__))
SDK = os.path.dirname(HERE)
ROOT = os.path.dirname(os.path.dirname(SDK))
READMES = [os.path.join(ROOT, "README.md"), os.path.join(SDK, "README.md")]
DOCUMENTED = re.compile(r"^\s+(PYTHONPATH=clients/python .*-m dex worker .*)$")

MODULE = '''
import dex

@dex.activity("run-command-double")
def double(x):
    return 2 * x

@dex.workflow("run-command-flow")
async def flow(ctx, x):
    return await ctx.activity(double, x)
'''


def documented_commands():
    found = []
    for path in READMES:
        with open(path) as f:
            found += [(os.path.basename(os.path.dirname(path)) or "README", m.group(1))
                      for m in map(DOCUMENTED.match, f) if m]
    return found


def test_the_readmes_document_the_command():
    assert len(documented_commands()) >= 2        # the top-level README's and the SDK's


def argv(command, queues, python=sys.executable):
    """The documented command with this interpreter (python3 may be another one here, without
    psycopg), the test's module and queues: (environment, arguments)."""
    words = shlex.split(command)
    env = {}
    while "=" in words[0]:
        k, v = words.pop(0).split("=", 1)
        env[k] = v
    assert words[0] == "python3"
    swap = {"python3": python, "mymodule": "run_command_flows", "orders": queues[0],
            "payments": queues[1]}
    return env, [swap.get(w, w) for w in words]


@pytest.fixture
def built_checkout(tmp_path):
    """A directory laid out as the checkout root after `make`: clients/python and dex.so (a
    stand-in: Python only needs the name to take it for the module dex), and the worker's
    module."""
    os.makedirs(tmp_path / "clients")
    os.symlink(SDK, tmp_path / "clients" / "python")
    (tmp_path / "dex.so").write_bytes(b"")
    (tmp_path / "run_command_flows.py").write_text(MODULE)
    return tmp_path


@pytest.mark.parametrize("command", [c for _, c in documented_commands()],
                         ids=[r for r, _ in documented_commands()])
def test_the_documented_command_runs_a_worker_in_a_built_checkout(command, built_checkout,
                                                                  client, queues):
    env, args = argv(command, queues)
    with worker_process(args, cwd=built_checkout, env=dict(os.environ, **env)) as proc:
        run_id = client.start("run-command-flow", 21, queue=queues[0])
        try:
            assert client.result(run_id, timeout=30) == 42
        except TimeoutError:
            proc.kill()
            pytest.fail(f"the worker ran nothing: {proc.communicate()[0][-2000:]}")
        stop_with_sigterm(proc)


def test_without_dash_p_the_checkout_root_shadows_the_sdk(built_checkout, queues):
    """What -P is for: the same command without it imports the dex.so of the checkout root."""
    _, command = documented_commands()[0]
    env, args = argv(command, queues)
    args.remove("-P")
    out = subprocess.run(args, cwd=built_checkout, env=dict(os.environ, **env),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert "No code object available for dex" in out.stderr
