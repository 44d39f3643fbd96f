"""A run option is declared once, on its group's field (issue 44, item 1): the field's
metadata (:func:`daskstraggle._declared_options.declared`) carries its constraint and its
command-line option, and from it come the ``fit_*`` keywords and docs, ``solve``'s group,
the solve commands' options, ``docs/cli.md`` and the range check before any cluster work."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from daskstraggle import StopRule, fit_pca, solve
from daskstraggle.cli import pca
from daskstraggle.errors import InvalidParameterError
from daskstraggle.options import Report, RuntimeSpec, run_groups

ROOT = Path(__file__).parents[1]

#: A script that declares a new run option, ``audit_every``, by one field of a subclass of
#: :class:`Report` registered as the run's report group, then looks for it everywhere.
NEW_OPTION = textwrap.dedent('''
    import dataclasses, importlib.util, inspect, json, sys, warnings
    import numpy as np, zarr
    from daskstraggle import options
    from daskstraggle._declared_options import CliOption, Constraint, declared

    @dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
    class AuditedReport(options.Report):
        audit_every: int | None = declared(None, constraint=Constraint(int, low=1), cli=CliOption(
            "--audit-every", "audit_every", "Audit the iterate every N rounds.", type=int,
            metavar="N"))

    options.RUN_GROUPS["report"] = AuditedReport  # before the faces are built

    import daskstraggle.api as api
    from daskstraggle import fit_pca, solve
    from daskstraggle.cli import main
    from daskstraggle.errors import InvalidParameterError

    seen = []
    run = api._run
    def spy(*args, **kwargs):
        seen.append(kwargs["report"].audit_every)
        return run(*args, **kwargs)
    api._run = spy

    param = inspect.signature(fit_pca).parameters["audit_every"]
    assert param.kind is param.KEYWORD_ONLY and param.default is None, param
    assert "    audit_every : int | None, default=None\\n" in fit_pca.__doc__
    assert "Audit the iterate every N rounds." in fit_pca.__doc__
    X = np.random.default_rng(0).normal(size=(60, 4))
    fit_pca(X, 2, runtime="local", audit_every=3, rng=0)
    solve("pca", X, runtime="local", report=AuditedReport(audit_every=5), rng=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        solve("pca", X, runtime="local", audit_every=6, rng=0)
    assert "report=AuditedReport(audit_every=...)" in str(caught[0].message)
    try:
        fit_pca(X, 2, runtime="local", audit_every=0)
    except InvalidParameterError as err:
        assert str(err) == ("The 'audit_every' parameter of fit_pca (CLI: --audit-every) "
                            "must be an int >= 1. Got 0 instead."), err
    else:
        raise AssertionError("audit_every=0 was not refused")

    store = sys.argv[1]
    zarr.create_array(store, shape=X.shape, chunks=(30, 4), dtype="f8")[:] = X
    assert main(["pca", store, "--runtime", "local", "--audit-every", "4", "--json"]) == 0
    assert main(["pca", "--help"]) == 0
    spec = importlib.util.spec_from_file_location("docs_cli", sys.argv[2])
    docs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(docs)
    page = docs.render()
    assert "--audit-every N" in page and "Audit the iterate every N rounds." in page
    print("SEEN", json.dumps(seen))
''')


def test_a_run_option_declared_once_reaches_the_faces_solve_the_cli_and_its_docs(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", NEW_OPTION, str(tmp_path / "x.zarr"),
         str(ROOT / "tests" / "test_docs_cli.py")],
        capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    # fit_pca, solve's group, solve's moved keyword, the refused 0, the command line
    assert "SEEN [3, 5, 6, 0, 4]" in done.stdout, done.stdout[-2000:]
    help_text = done.stdout.partition("Usage:")[2]
    assert "--audit-every N" in help_text and "Audit the iterate every N" in help_text


def test_every_declared_command_line_option_is_an_option_of_the_solve_commands():
    params = {param.name: param for param in pca.params}
    declared = [option for group in run_groups().values()
                for field in dataclasses.fields(group)
                if (option := field.metadata.get("cli")) is not None]
    assert len(declared) >= 19
    for option in declared:
        param = params[option.dest]
        assert option.flag in param.opts and param.help == option.help, option.dest
        assert param.multiple == option.multiple, option.dest


@pytest.mark.parametrize(("call", "message"), [
    (lambda X: fit_pca(X, runtime="local", aggregation="star"),
     "The 'aggregation' parameter of fit_pca (CLI: --aggregation) must be one of ['flat', "
     "'tree']. Got 'star' instead."),
    (lambda X: fit_pca(X, runtime="sim", min_workers=0),
     "The 'min_workers' parameter of fit_pca (CLI: --min-workers) must be an int >= 1. Got 0 "
     "instead."),
    (lambda X: solve("pca", X, report=Report(reference="yes")),
     "The 'reference' parameter of solve (CLI: --reference) must be True or False. Got 'yes' "
     "instead."),
    (lambda X: solve("pca", X, runtime=RuntimeSpec("sim", backup_after=0)),
     "The 'backup_after' parameter of solve (CLI: --backup-after) must be a finite number > 0 "
     "or None. Got 0.0 instead."),
    (lambda X: solve("pca", X, stop=StopRule(), checkpoint=""),
     "The 'checkpoint' parameter of solve (CLI: --checkpoint) must be a path that ends in the "
     "name to write, e.g. 'run.ckpt'. Got '' instead."),
])
def test_a_value_out_of_its_declared_range_is_one_line_built_from_the_constraint(call, message):
    X = np.random.default_rng(0).normal(size=(40, 3))
    with pytest.raises(InvalidParameterError) as info:
        call(X)
    assert str(info.value) == message
