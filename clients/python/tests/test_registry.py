"""@dex.workflow and @dex.activity refuse a second definition of what is defined (issue 17): a
second function under a workflow's name and version, or an activity's name, would silently
replace the first, and workers would run whichever was imported last."""

import os
import subprocess
import sys

import pytest

import dex
from dex.registry import ACTIVITIES, WORKFLOWS


@dex.workflow("registry-flow", version=1)
async def first(ctx, arg):
    return 1


@dex.activity("registry-act")
def first_act(arg):
    return 1


def test_a_second_workflow_of_the_same_name_and_version_is_refused():
    with pytest.raises(dex.DuplicateDefinition) as raised:
        @dex.workflow("registry-flow", version=1)
        async def second(ctx, arg):
            return 2
    message = str(raised.value)
    assert message.startswith("workflow 'registry-flow' version 1 is defined twice: by "
                              "test_registry.first (")
    assert "test_registry.test_a_second_workflow_of_the_same_name_and_version_is_refused." \
           "<locals>.second (" in message and message.endswith("give one of them another version")
    assert isinstance(raised.value, ValueError) and isinstance(raised.value, dex.DexError)
    assert WORKFLOWS[("registry-flow", 1)].fn is first          # the first stays

    @dex.workflow("registry-flow", version=2)                   # another version is another
    async def third(ctx, arg):
        return 3
    assert WORKFLOWS[("registry-flow", 2)].fn is third


def test_a_second_activity_of_the_same_name_is_refused():
    with pytest.raises(dex.DuplicateDefinition, match="^activity 'registry-act' is defined "
                       "twice: .* give one of them another name$"):
        @dex.activity("registry-act")
        def second_act(arg):
            return 2
    assert ACTIVITIES["registry-act"].fn is first_act


def test_the_same_function_defined_again_replaces_itself():
    """A module reloaded, or a test that defines its workflow and runs twice: the same
    function (module and qualified name), not another one."""
    def define():
        @dex.workflow("registry-again")
        async def again(ctx):
            return None

        @dex.activity("registry-again")
        def again_act():
            return None
        return again, again_act

    define()
    again, again_act = define()
    assert WORKFLOWS[("registry-again", 1)].fn is again
    assert ACTIVITIES["registry-again"].fn is again_act


def test_a_worker_refuses_two_workflows_of_one_name_and_version():
    class Impostor:
        __dex_workflow__ = dex.registry.WorkflowDefinition("registry-flow", 1, lambda: None,
                                                            None, False)
    with pytest.raises(dex.DuplicateDefinition):
        dex.Worker("", ["q"], workflows=[first, Impostor()])


def test_a_script_imported_again_by_its_name_is_told_so(tmp_path):
    """``python3 flows.py`` where flows.py defines a workflow and something imports ``flows``:
    its workflows are defined twice, as ``__main__``'s and as ``flows``'s."""
    (tmp_path / "flows.py").write_text(
        "import dex\n\n@dex.workflow('registry-main')\nasync def flow(ctx):\n    return None\n\n"
        "import flows  # a worker started from here would import it again\n")
    sdk = os.path.dirname(os.path.dirname(os.path.abspath(dex.__file__)))
    out = subprocess.run([sys.executable, "flows.py"], cwd=tmp_path, capture_output=True,
                         text=True, env=dict(os.environ, PYTHONPATH=sdk), timeout=60)
    assert out.returncode == 1
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("dex.errors.DuplicateDefinition: workflow 'registry-main' version 1 "
                           "is defined twice: by __main__.flow (")
    assert "(one module imported twice, as __main__ and by its name?" in last
