#!/bin/sh
# A fake agent for orchestrd's loops (README, "Your first loop"): no model, no network,
# it leaves what each loop type must leave, so a plan runs to its merge.
# The prompt is on stdin; ORCHESTRD_LOOP_TYPE is the loop's type and
# ORCHESTRD_LOOP_ARTIFACT the file it must write (relative to the current
# directory, the loop's git worktree; empty for a code loop).
set -e
prompt=$(cat)
a=$ORCHESTRD_LOOP_ARTIFACT
[ -z "$a" ] || mkdir -p "$(dirname "$a")"
case $ORCHESTRD_LOOP_TYPE in
plan) cat > "$a" <<'MD'
# Greetings

## Specs to Create

- spec-hello: a file that says hello
- spec-bye: a file that says goodbye
MD
;;
spec) # .loopr/specs/001-hello.spec.md is the spec "hello"
  name=$(basename "$a" .spec.md); name=${name#*-}
  printf '# %s\n\n## Phases\n\n1. **Write** - write greetings/%s.txt\n' "$name" "$name" > "$a" ;;
phase) # the spec is in the prompt: its phase says which file
  file=$(printf '%s\n' "$prompt" | sed -n 's/^1\. \*\*Write\*\* - write //p' | head -n 1)
  printf 'Write one line to the file below.\n\nFile: %s\n' "$file" > "$a" ;;
code) # the phase is in the prompt: write the file it names
  file=$(printf '%s\n' "$prompt" | sed -n 's/^File: //p' | head -n 1)
  mkdir -p "$(dirname "$file")"
  echo "written by loop $ORCHESTRD_LOOP_ID" > "$file" ;;
esac
