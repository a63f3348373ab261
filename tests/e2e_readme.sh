#!/usr/bin/env bash
# e2e_readme.sh: the README's five-minute tour is a test, as docs/tutorial.md is, so the
# front door cannot drift from what the program prints. It runs every command of the
# README's ```sh blocks and checks every output line they show, through the tutorial's
# harness (tests/e2e_tutorial.sh: its header has the rules). The tour needs no shared data
# (generated traces, dummy:stories260k), so this test never skips.
#
# The floor of 10 commands is the tour's count: fewer means a block lost its `$ ` lines
# (a command shown without them is not run). README_DOC=FILE checks another copy.
cd "$(dirname "$0")/.." || exit 1
TUTORIAL_DOC=${README_DOC:-$PWD/README.md} TUTORIAL_MIN_COMMANDS=10 exec bash tests/e2e_tutorial.sh
