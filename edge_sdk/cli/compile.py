"""`edge-sdk compile MODEL --variant V --target T -o OUT.edgepkg`: add_compile_parser -> drive_compile -> compile_model."""
from __future__ import annotations

from pathlib import Path

from edge_sdk.cli.common import (add_model_options, check_output_file, console, interrupts_stay_interrupts, load_model,
                                 print_json)
from edge_sdk.cli.preprocessing import add_preprocess_options, apply_preprocess_options
from edge_sdk.errors import UsageError
from edge_sdk.targets import TARGET_NAMES
from edge_sdk.variants import BASELINE, CALIBRATED_VARIANTS, TUNABLE_VARIANTS, names


def add_compile_parser(sub) -> None:
    p = sub.add_parser("compile", help="compile a model into a .edgepkg for one variant and target")
    add_model_options(p)
    p.add_argument("--variant", default=BASELINE, help=f"{', '.join(names())} (default {BASELINE})")
    p.add_argument("--target", default="host", help=f"{', '.join(TARGET_NAMES)} (default host)")
    p.add_argument("-o", "--output", type=Path, required=True, help="the .edgepkg file to write")
    p.add_argument("--calibrate", type=Path, metavar="DIR", help=f"{'/'.join(CALIBRATED_VARIANTS)} of a float "
                   "model: calibrate activation ranges on the images in DIR (default: seeded random frames, "
                   "with a warning)")
    p.add_argument("--no-tuning", action="store_true", help="use our hand schedules only, ignoring tuning records "
                   "(and no per-layer choice)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--choice", action="store_true", default=None, help="Pi targets: price every layer's candidate "
                   "schedules on the modelled A53 clock under qemu and keep the cheapest correct one (cached under "
                   "$EDGE_SDK_CACHE/choice; for workloads the shipped records lack). Default: the shipped choice "
                   "records (edge_sdk/tune/records/choice), nothing priced; $EDGE_SDK_CHOICE=1 / 0 as --choice / "
                   "--no-choice; see edge-sdk inspect")
    g.add_argument("--no-choice", action="store_true", help="Pi targets: keep each kernel's rule (no per-layer "
                   "choice, no records)")
    p.add_argument("--tuning-records", type=Path, action="append", default=[], metavar="DIR",
                   help="also apply the tuning records under DIR/<target>/ (searched before the user's "
                   f"~/.local/share/edge-sdk/tuning and the shipped ones; {'/'.join(TUNABLE_VARIANTS)} only; "
                   "repeatable)")
    p.add_argument("--sign-key", type=Path, metavar="KEY",
                   help="sign the package with this key file (default: your key under the data folder, made on "
                   "first use; see edge-sdk keys)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    add_preprocess_options(p)
    p.set_defaults(drive=drive_compile)


def drive_compile(args) -> int:
    from edge_sdk.compiler.build import compile_model
    from edge_sdk.targets import get_target
    from edge_sdk.variants import get_variant

    variant, target = get_variant(args.variant), get_target(args.target)
    if args.output.suffix != ".edgepkg":
        raise UsageError(f"{args.output}: the output file must end in .edgepkg")
    check_output_file(args.output)  # before the compile, not after it
    from edge_sdk.signing import signing_key, using_key

    if args.sign_key is not None:
        signing_key(args.sign_key)  # an unreadable key fails now, not after the compile
    if args.calibrate is not None and (not variant.calibrated or not args.calibrate.is_dir()):
        raise UsageError(f"--calibrate {args.calibrate}: needs --variant {'/'.join(CALIBRATED_VARIANTS)} "
                         "and a folder of images")
    for d in args.tuning_records:
        if args.no_tuning or not variant.tunable or not d.is_dir():
            raise UsageError(f"--tuning-records {d}: needs an existing folder, --variant "
                             f"{'/'.join(TUNABLE_VARIANTS)} and no --no-tuning")
    target.compiler()  # a missing cross compiler fails before the model is built
    out = console()
    with out.status(f"loading {args.model}") as status:
        model = load_model(args, family=variant.family)
        apply_preprocess_options(args, model, warn=lambda text: out.print(f"[yellow]warning:[/] {text}", highlight=False, soft_wrap=True))
        if args.calibrate is not None:
            model.options["calibrate"] = str(args.calibrate)

        def progress(msg: str) -> None:
            status.update(f"{model.name} {variant.name} -> {target.name}: {msg}")
            out.print(f"  [dim]{model.name} -> {target.name}:[/] {msg}", highlight=False)

        with using_key(args.sign_key), interrupts_stay_interrupts():
            result = compile_model(model, variant=variant, target=target, out=args.output, progress=progress,
                                   seed=args.seed, use_tuning=not args.no_tuning, tuning_roots=args.tuning_records,
                                   choose=False if args.no_choice else args.choice)
    if args.json:
        print_json({"package": str(result.package), "seconds": result.seconds,
                    "size_bytes": result.package.stat().st_size})
    else:
        print(result)
    return 0
