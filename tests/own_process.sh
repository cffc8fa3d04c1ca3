#!/usr/bin/env bash
# Run each test file named after the pytest command in a pytest process of its own, two at a
# time (this machine's two cores), longest first as given; print each one's output whole once
# all have ended, and fail when any failed. (Why some files need a process of their own: the
# Makefile, OWN_PROCESS_TESTS.)
set -u
pytest=$1
shift
logs=$(mktemp -d)
export pytest logs
printf '%s\n' "$@" | xargs -P 2 -I{} bash -c \
    'name=$(basename "$1" .py); "$pytest" -ra "$1" > "$logs/$name.log" 2>&1; echo $? > "$logs/$name.rc"' \
    _ {}
status=0
for file in "$@"; do
    name=$(basename "$file" .py)
    cat "$logs/$name.log"
    if [ "$(cat "$logs/$name.rc" 2>/dev/null)" != 0 ]; then
        echo "FAILED in its own process: $file"
        status=1
    fi
done
rm -rf "$logs"
exit $status
