"""`edge-sdk keys list|trust|export`: the package-signing keys (signing.py).

    edge-sdk keys export > me.pub            # this machine's public key, one line
    edge-sdk keys trust "$(cat other.pub)"   # packages signed by that key are accepted here
    edge-sdk keys list                        # your key and every trusted one
"""
from __future__ import annotations

from pathlib import Path

from edge_sdk.cli.common import print_json
from edge_sdk.errors import UsageError


def add_keys_parser(sub) -> None:
    p = sub.add_parser("keys", help="package-signing keys: list the trusted ones, trust another, export yours")
    ksub = p.add_subparsers(dest="keys_command", required=True, metavar="ACTION")
    lst = ksub.add_parser("list", help="your signing key and the trusted public keys")
    lst.add_argument("--json", action="store_true")
    t = ksub.add_parser("trust", help="trust a public key (a line from `edge-sdk keys export`, or 64 hex digits)")
    t.add_argument("key", help="the key text, or a file holding it")
    t.add_argument("--name", default="", help="a name to remember it by (default: the name in the exported line)")
    e = ksub.add_parser("export", help="print your public key (made on first use), for `keys trust` elsewhere")
    e.add_argument("--sign-key", type=Path, metavar="KEY", help="export this key file's public key instead")
    p.set_defaults(drive=drive_keys)


def drive_keys(args) -> int:
    from edge_sdk import signing

    if args.keys_command == "export":
        print(signing.export_public(args.sign_key))
        return 0
    if args.keys_command == "trust":
        text = args.key
        if len(text) < 200 and Path(text).is_file():
            try:
                text = Path(text).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as e:
                raise UsageError(f"{args.key}: cannot read a key from it ({e})") from None
        key, added = signing.trust_key(text, name=args.name)
        print(f"{'trusted' if added else 'already trusted'}: {key.id} {key.name or '(unnamed)'}")
        return 0
    mine = signing.default_key_path()
    own = signing.signing_key().verify_key.encode().hex() if mine.exists() else None
    rows = [{"id": k.id, "key": k.key, "name": k.name, "added": k.added, "yours": k.key == own}
            for k in signing.trusted_keys()]
    if args.json:
        print_json({"signing_key": str(mine) if own else None, "trusted": rows})
        return 0
    print(f"your signing key: {mine}" if own else f"your signing key: none yet ({mine} is made on first compile)")
    if not rows:
        print("no trusted keys")
    for r in rows:
        print(f"  {r['id']}  {r['name'] or '(unnamed)'}{'  (yours)' if r['yours'] else ''}  added {r['added'] or '?'}")
    return 0
