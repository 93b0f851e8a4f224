"""The README's command that runs a worker without installing the SDK works where it is meant to
be typed (issue 17): in the checkout root, which holds the server's dex.so after a build.  There
`PYTHONPATH=clients/python python3 -m dex worker ...` imported dex.so instead of the SDK ("No
code object available for dex").  The test takes the command from the READMEs, and runs it in a
directory laid out as a built checkout: clients/python (this SDK) and a dex.so."""

import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest

from conftest import stop_with_sigterm, worker_process

HERE = os.path.dirname(os.path.abspath(__file__))
SDK = os.path.dirname(HERE)
ROOT = os.path.dirname(os.path.dirname(SDK))
# the manual's page of the Python SDK, and the SDK's own README
READMES = [os.path.join(ROOT, "docs", "python.md"), os.path.join(SDK, "README.md")]
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
            found += [(os.path.relpath(path, ROOT), m.group(1))
                      for m in map(DOCUMENTED.match, f) if m]
    return found


def test_the_readmes_document_the_command():
    assert len(documented_commands()) >= 2        # docs/python.md's and the SDK's README's


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


def run_a_flow(client, queues, args, **kw):
    """Run a workflow with the worker that ``args`` start, then stop it with SIGTERM."""
    with worker_process(args, **kw) as proc:
        run_id = client.start("run-command-flow", 21, queue=queues[0])
        try:
            assert client.result(run_id, timeout=30) == 42
        except TimeoutError:
            proc.kill()
            pytest.fail(f"the worker ran nothing: {proc.communicate()[0][-2000:]}")
        stop_with_sigterm(proc)


@pytest.mark.parametrize("command", [c for _, c in documented_commands()],
                         ids=[r for r, _ in documented_commands()])
def test_the_documented_command_runs_a_worker_in_a_built_checkout(command, built_checkout,
                                                                  client, queues):
    env, args = argv(command, queues)
    run_a_flow(client, queues, args, cwd=built_checkout, env=dict(os.environ, **env))


def test_without_dash_p_the_checkout_root_shadows_the_sdk(built_checkout, queues):
    """What -P is for: the same command without it imports the dex.so of the checkout root."""
    _, command = documented_commands()[0]
    env, args = argv(command, queues)
    args.remove("-P")
    out = subprocess.run(args, cwd=built_checkout, env=dict(os.environ, **env),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert "No code object available for dex" in out.stderr


INSTALL = re.compile(r"^\s+((?:python3 -m venv|~/dex-venv/bin/pip install) .*?)\s*(?:#.*)?$")


def test_the_documented_install_runs_a_worker_in_a_built_checkout(tmp_path, client, queues):
    """docs/python.md's install (a venv that sees Debian's psycopg, pip install ./clients/python),
    made in a built checkout, and its `dex worker` command run there."""
    for module in ("ensurepip", "setuptools", "wheel"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"no {module} for {sys.executable} (python3-venv, python3-pip)")
    with open(READMES[0]) as f:
        steps = [m.group(1) for m in map(INSTALL.match, f) if m]
    assert len(steps) == 2, steps
    checkout = tmp_path / "checkout"
    shutil.copytree(SDK, checkout / "clients" / "python",   # pip builds in the tree
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    (checkout / "dex.so").write_bytes(b"")
    (checkout / "run_command_flows.py").write_text(MODULE)
    venv = tmp_path / "dex-venv"
    for step in steps:
        args = [sys.executable if w == "python3" else w.replace("~/dex-venv", str(venv))
                for w in shlex.split(step)]
        out = subprocess.run(args, cwd=checkout, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, f"{step}: {out.stdout[-1000:]}{out.stderr[-2000:]}"
    run_a_flow(client, queues, [str(venv / "bin" / "dex"), "worker", "run_command_flows",
                                "-w", queues[0], "-a", queues[1]], cwd=checkout)
