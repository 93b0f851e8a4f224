"""@dex.workflow and @dex.activity refuse a second definition of what is defined (issue 17): a
second function under a workflow's name and version, or an activity's name, would silently
replace the first, and workers would run whichever was imported last."""

import importlib
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


def test_two_functions_of_one_name_in_one_module_are_refused(tmp_path, monkeypatch):
    """A copy-paste: the same function name twice in a module, both for one (workflow,
    version) or one activity name, replaced each other without a word."""
    (tmp_path / "registry_copied.py").write_text(
        "import dex\n\n"
        "@dex.workflow('registry-copied')\nasync def flow(ctx):\n    return 1\n\n"
        "@dex.workflow('registry-copied')\nasync def flow(ctx):\n    return 2\n")
    (tmp_path / "registry_copied_act.py").write_text(
        "import dex\n\n"
        "@dex.activity('registry-copied-act')\ndef act():\n    return 1\n\n"
        "@dex.activity('registry-copied-act')\ndef act():\n    return 2\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(dex.DuplicateDefinition) as raised:
        importlib.import_module("registry_copied")
    where = str(tmp_path / "registry_copied.py")
    assert str(raised.value) == (
        f"workflow 'registry-copied' version 1 is defined twice: by registry_copied.flow "
        f"({where}:3) and by registry_copied.flow ({where}:7); give one of them another version")
    with pytest.raises(dex.DuplicateDefinition, match="^activity 'registry-copied-act' is "
                       "defined twice: by registry_copied_act.act .*:3.* and by "
                       "registry_copied_act.act .*:7"):
        importlib.import_module("registry_copied_act")


def test_a_module_reloaded_after_an_edit_replaces_its_definitions(tmp_path, monkeypatch):
    path = tmp_path / "registry_reloaded.py"
    path.write_text("import dex\n\n@dex.workflow('registry-reloaded')\nasync def flow(ctx):\n"
                    "    return 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("registry_reloaded")
    path.write_text("import dex\n\n# moved down a line\n@dex.workflow('registry-reloaded')\n"
                    "async def flow(ctx):\n    return 2\n")
    importlib.invalidate_caches()
    os.utime(path, (0, 2_000_000_000))          # newer than the cached bytecode, whatever it is
    importlib.reload(module)
    assert WORKFLOWS[("registry-reloaded", 1)].fn is module.flow
    assert module.flow.__code__.co_firstlineno == 4


def test_dex_worker_names_the_two_modules_of_a_duplicate_in_one_line(tmp_path):
    """Two modules given to `dex worker` that define the same (workflow, version): a 14-frame
    traceback said it; one line does."""
    for name, result in (("registry_one", 1), ("registry_two", 2)):
        (tmp_path / f"{name}.py").write_text(
            f"import dex\n\n@dex.workflow('registry-both')\nasync def flow(ctx):\n"
            f"    return {result}\n")
    sdk = os.path.dirname(os.path.dirname(os.path.abspath(dex.__file__)))
    out = subprocess.run([sys.executable, "-m", "dex", "worker", "registry_one", "registry_two",
                          "-w", "q"], cwd=tmp_path, capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=sdk), timeout=60)
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.splitlines() == [
        f"python3 -m dex worker: workflow 'registry-both' version 1 is defined twice: by "
        f"registry_one.flow ({tmp_path}/registry_one.py:3) and by registry_two.flow "
        f"({tmp_path}/registry_two.py:3); give one of them another version"]
