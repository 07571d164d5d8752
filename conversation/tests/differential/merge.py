#!/usr/bin/env python3
"""Joins generate.py's cases with judge.py's verdicts of each release into the committed
corpus (gzip'd JSON lines: the seeds, then each case with a verdict per release) and writes
VALIDATORS.md, the list of every validator of the SDK's models with the cases that made it
return and raise.

    merge.py CASES OUT_CORPUS OUT_VALIDATORS RELEASE=VERDICTS...
"""

import gzip
import json
import sys


def main():
    cases_path, corpus_path, validators_path, *judged = sys.argv[1:]
    releases = {}
    listed = {}
    for arg in judged:
        release, path = arg.split("=", 1)
        verdicts = {}
        with open(path) as lines:
            for line in lines:
                verdict = json.loads(line)
                if "validators" in verdict:
                    listed[release] = verdict["validators"]
                else:
                    verdicts[verdict.pop("id")] = verdict
        releases[release] = verdicts

    with open(cases_path) as lines, gzip.open(corpus_path, "wt", compresslevel=9) as out:
        out.write(lines.readline())
        count = 0
        for line in lines:
            case = json.loads(line)
            for release, verdicts in releases.items():
                case[release] = verdicts[case["id"]]
            out.write(json.dumps(case) + "\n")
            count += 1

    with open(validators_path, "w") as out:
        out.write(VALIDATORS_HEAD.format(count=count))
        for release, validators in listed.items():
            out.write(f"\n## openhands-sdk {release}\n\n")
            out.write("| validator | kind | returned in | raised in |\n|---|---|---|---|\n")
            for v in validators:
                where = f"`{v['validator']}` ({v['file']}:{v['line']})"
                out.write(
                    f"| {where} | {v['kind']} | {case_ref(v['returned'])} | {case_ref(v['raised'])} |\n"
                )
    print(f"merge: {count} cases, {', '.join(releases)}", file=sys.stderr)


def case_ref(case_id):
    return f"`{case_id}`" if case_id else "—"


VALIDATORS_HEAD = """# The SDK's validators and the cases that exercise them

Written by `scripts/differential` (merge.py); do not edit. Every field and model validator
of the pydantic models a `ConversationInfo` reaches (field types, recursively, and every
subclass a discriminated union can name), per release, with the id of the first corpus case
(of {count}, in `corpus.jsonl.gz`) in which the validator returned and in which it raised.
A "—" under "raised in" is a validator that no case made refuse: most never refuse (they
normalise or fill in defaults). Disagreements not mended yet are listed in known.txt.
"""


if __name__ == "__main__":
    main()
