#!/usr/bin/env bash
# e2e_tutorial.sh: docs/tutorial.md is the test, so the tutorial cannot drift from what the
# program prints.
#
# Every command of the tutorial's ```sh blocks (a line "$ CMD", continued while it ends with
# a backslash) runs in order in one scratch folder, with `twinserve` on PATH and policies/
# linked there, and must exit 0. The lines shown after a command are its output, trimmed:
# each must appear in what the command printed (stdout and stderr), with runs of spaces
# compared as one space and " ... " in a line (or at its start or end) standing for any
# text; a line "..." marks output left out. Lines are checked, not whole outputs, so that a
# summary gaining a line elsewhere does not break the tutorial, while every figure it
# quotes is checked. TUTORIAL_DOC=FILE checks another copy (to see that a wrong figure
# fails), or another document (tests/e2e_readme.sh: the README's tour), with
# TUTORIAL_MIN_COMMANDS its own floor.
. "$(dirname "$0")/lib_e2e.sh"
e2e_setup e2e_tutorial
DOC=${TUTORIAL_DOC:-$PWD/docs/tutorial.md}
MIN_COMMANDS=${TUTORIAL_MIN_COMMANDS:-15} # the tutorial has more; fewer means the parser lost some

mkdir -p "$T/bin" "$T/work" "$T/cmds"
ln -s "$BIN" "$T/bin/twinserve"
ln -s "$POL" "$T/work/policies"

# Split the document into $T/cmds/N.sh (the command) and $T/cmds/N.want (its lines).
awk -v dir="$T/cmds" '
    /^```sh[ \t]*$/ { inblock = 1; next }
    /^```/ { if (inblock && cont) { print "unterminated command at line " NR > "/dev/stderr"; exit 2 }
             inblock = 0; next }
    !inblock { next }
    cont { print > (dir "/" n ".sh"); cont = /\\$/; next }
    /^\$ / { n++; sub(/^\$ /, ""); print > (dir "/" n ".sh"); printf "" > (dir "/" n ".want")
             cont = /\\$/; next }
    /^[ \t]*$/ || /^[ \t]*\.\.\.[ \t]*$/ { next }
    { if (!n) { print "output before any command at line " NR > "/dev/stderr"; exit 2 }
      print > (dir "/" n ".want") }
    END { print n + 0 > (dir "/count") }
' "$DOC" || { echo "FAIL: cannot read the commands of $DOC"; exit 1; }

# has_lines WANT GOT: every line of WANT is in GOT (see above); prints the missing ones.
has_lines() {
    awk '
        function norm(s) { gsub(/[ \t]+/, " ", s); sub(/^ /, "", s); sub(/ $/, "", s); return s }
        NR == FNR { got[++ng] = norm($0); next }
        {
            want = norm($0); sub(/^\.\.\. /, "", want); sub(/ \.\.\.$/, "", want)
            nf = split(want, frag, / \.\.\. /); found = 0
            for (i = 1; i <= ng && !found; i++) {
                pos = 1; ok = 1
                for (j = 1; j <= nf && ok; j++) {
                    k = index(substr(got[i], pos), frag[j])
                    if (k == 0) ok = 0; else pos += k - 1 + length(frag[j])
                }
                found = ok
            }
            if (!found) { print "    missing: " $0; bad = 1 }
        }
        END { exit bad }' "$2" "$1"
}

count=$(cat "$T/cmds/count")
begin "the tutorial has its commands ($count)"
[ "$count" -ge "$MIN_COMMANDS" ] || bad " only $count commands found in $DOC"
end

for ((i = 1; i <= count; i++)); do
    cmd=$(cat "$T/cmds/$i.sh")
    begin "tutorial step $i: $(head -n 1 "$T/cmds/$i.sh" | cut -c1-90)"
    run "step$i" env -C "$T/work" PATH="$T/bin:$PATH" bash -c "$cmd"
    want_rc 0
    cat "$T/step$i.out" "$T/step$i.err" >"$T/step$i.all"
    if ! missing=$(has_lines "$T/cmds/$i.want" "$T/step$i.all"); then
        bad " output lacks lines the tutorial shows:"$'\n'"$missing"
    fi
    end
done

e2e_finish e2e_tutorial
