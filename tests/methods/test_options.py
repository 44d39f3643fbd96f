"""Methods declare their command-line options; the CLI is built from the declarations."""

from __future__ import annotations

import inspect

import pytest

from daskstraggle.errors import InvalidParameterError
from daskstraggle.methods import (
    SGD,
    Method,
    list_methods,
    make_method,
    method_cli_options,
    method_params_from_cli,
)
from daskstraggle.methods.options import MethodOption, check_cli_values, method_options

#: A value each declared option accepts, by dest.
SAMPLE = {"n_wait": 2, "subpartitions": 3, "balance": True, "balance_margin": 0.2,
          "balance_window": 5.0, "tolerance": 0.1, "ordering": "age", "age_threshold": 3,
          "degrees": "1,2", "max_delay": 2, "update_order": "shortest",
          "scheme": "cyclic-repetition", "n_stragglers": 1, "nesterov": True}


def test_every_declared_option_builds_its_method():
    declared = method_cli_options()
    assert set(declared) == set(list_methods())
    options = method_options(type(make_method(name)) for name in list_methods())
    assert set(options) == set(SAMPLE) | {"batch_size", "alpha_slowdown"}
    for name, opts in declared.items():
        for option in opts:
            if option.dest in ("batch_size", "alpha_slowdown"):  # need their scheme
                continue
            values = {option.dest: SAMPLE[option.dest]}
            if option.dest.startswith("balance_"):
                values["balance"] = True
            if option.dest == "n_stragglers" and name in ("gram", "block"):
                values["scheme"] = "cyclic-repetition"  # their default, uncoded, has no s
            # make_method refuses a parameter its constructor (or scheme) does not take
            method = make_method(name, **method_params_from_cli(name, values))
            assert method.get_params(), (name, option)


def test_scheme_options_reach_the_scheme():
    coded = make_method("coded", **method_params_from_cli(
        "coded", {"scheme": "bcc", "batch_size": 2}))
    assert coded.get_params()["scheme"]["batch_size"] == 2
    gram = make_method("gram", **method_params_from_cli(
        "gram", {"scheme": "partial-straggler", "alpha_slowdown": 2.0}))
    assert gram.get_params()["scheme"]["alpha"] == 2.0


def test_balance_options_make_a_load_balancer():
    params = method_params_from_cli("dsag", {"balance": True, "balance_window": 4.0})
    assert params["balance"].window == 4.0
    with pytest.raises(InvalidParameterError, match="--balance-window: only with --balance"):
        method_params_from_cli("sgd", {"balance_window": 4.0})


@pytest.mark.parametrize(("method", "values", "message"), [
    ("gd", {"n_wait": 2}, "--wait: only with --method dsag, sag or sgd, not 'gd'"),
    ("auto", {"tolerance": 0.1, "ordering": "age"},
     "--tolerance, --ordering: only with --method partial, not 'auto'"),
    ("gram", {"nesterov": True}, "--nesterov: only with --method coded, not 'gram'"),
    ("gd", {"n_stragglers": 1},
     "--stragglers-tolerated: only with --method block, coded, gram or ignore-stragglers"),
    ("partial", {"degrees": "1,x"}, "--degrees must be comma-separated ints"),
])
def test_an_option_of_another_method_is_refused_naming_the_methods_that_take_it(
        method, values, message):
    with pytest.raises(InvalidParameterError, match=message.replace("(", r"\(")):
        method_params_from_cli(method, {**dict.fromkeys(SAMPLE), **values})


def test_options_not_given_leave_the_method_defaults():
    assert method_params_from_cli("dsag", dict.fromkeys(SAMPLE)) is None
    assert method_params_from_cli("gd", {"balance": False}) is None  # an off flag


class _Toy(Method):
    """A method that exists only in this test, with an option of its own."""

    name = "toy"
    cli_options = (MethodOption("--toy-rate", "toy_rate", "how fast.", type=float,
                                param="rate"),)


def test_a_new_methods_option_is_generated_and_routed_from_its_class_alone():
    options = method_options([SGD, _Toy])
    assert options["toy_rate"].flag == "--toy-rate"
    declared = {"sgd": SGD.cli_options, "toy": _Toy.cli_options}
    given = check_cli_values("toy", declared, {"toy_rate": 0.5, "n_wait": None})
    assert _Toy.params_from_cli(given) == {"rate": 0.5}
    with pytest.raises(InvalidParameterError, match="--toy-rate: only with --method toy"):
        check_cli_values("sgd", declared, {"toy_rate": 0.5})


def test_two_methods_declaring_one_dest_differently_is_a_programming_error():
    class Other(_Toy):
        cli_options = (MethodOption("--toy-rate", "toy_rate", "other help.", type=int),)

    with pytest.raises(ValueError, match="unlike another method"):
        method_options([_Toy, Other])


def test_the_cli_has_every_declared_option_and_names_no_method_in_its_routing():
    import daskstraggle.cli as cli

    flags = {opt for param in cli.pca.params for opt in param.opts}
    declared = method_options(type(make_method(name)) for name in list_methods())
    assert {option.flag for option in declared.values()} <= flags
    source = inspect.getsource(cli._run_solve) + inspect.getsource(cli._method_params)
    assert not [name for name in list_methods() if f'"{name}"' in source]


def test_the_method_help_lists_every_method_with_its_description():
    import daskstraggle.cli as cli
    from daskstraggle.methods import get_method_class

    (option,) = [p for p in cli.pca.params if "--method" in p.opts]
    for name in list_methods():
        description = get_method_class(name).description
        assert description and f"{name} ({description})" in option.help, name


def test_a_method_named_with_underscores_takes_its_options():
    assert method_params_from_cli("ignore_stragglers", {"n_stragglers": 2}) == \
        {"n_stragglers": 2}
    with pytest.raises(InvalidParameterError, match="not 'ignore-stragglers'"):
        method_params_from_cli("ignore_stragglers", {"n_wait": 2})
