#!/usr/bin/env bash
# The layout's rules (docs/design.md "Layers"), checked on the sources:
#   - a file includes only its own folder and the folders its layer may know,
#     so every import runs down and no folder imports one above it;
#   - inside a folder, no chain of includes leads from a file (with its
#     header) back to itself;
#   - the harness (eval, bench) and the server see the engine only through
#     include/promptkv.h;
#   - no source file is over 800 lines, generated tables aside.
# Prints one line per check and "N passed, N failed". Run from the repository root.
set -u
cd "$(dirname "$0")/.."

pass=0
fail=0
report() { # name, problems (one per line, empty when none)
    if [ -z "$2" ]; then
        echo "ok   $1"
        pass=$((pass + 1))
    else
        echo "FAIL $1"
        echo "$2" | sed 's/^/     /'
        fail=$((fail + 1))
    fi
}

# The folders each layer may include besides its own, lowest layer first
# (the table of docs/design.md). The command line also reaches two headers
# below the public API, named here.
declare -A MAY=(
    [base]=""
    [format]="base"
    [kernels]="base"
    [cache]="base kernels"
    [text]="base format"
    [model]="base format kernels text"
    [press]="base kernels"
    [engine]="base kernels cache text model press"
    [eval]="base"
    [bench]="base"
    [server]="base"
    [cli]="base eval bench server"
)
CLI_INTERNALS="model/synth.h press/observer.h"

# quoted includes of one file: "dir/name.h" or a bare "name.h" of its own folder
includes() { grep -hoE '^[[:space:]]*#[[:space:]]*include[[:space:]]+"[^"]+"' "$1" | sed -E 's/.*"([^"]+)"/\1/'; }

upward=""
for dir in src/*/ cli/; do
    layer=$(basename "$dir")
    if [ -z "${MAY[$layer]+set}" ]; then
        upward+="$dir: a folder docs/design.md's layers do not name"$'\n'
        continue
    fi
    for f in "$dir"*.c "$dir"*.h; do
        [ -e "$f" ] || continue
        while read -r inc; do
            [ -z "$inc" ] && continue
            case "$inc" in
            promptkv.h) continue ;;
            */*) ;;
            *)
                [ -e "$dir$inc" ] || upward+="$f: \"$inc\" is not a file of its own folder"$'\n'
                continue
                ;;
            esac
            top=${inc%%/*}
            [ "$top" = "$layer" ] && continue
            ok=false
            for m in ${MAY[$layer]}; do [ "$top" = "$m" ] && ok=true; done
            if [ "$layer" = cli ]; then for m in $CLI_INTERNALS; do [ "$inc" = "$m" ] && ok=true; done; fi
            $ok || upward+="$f includes \"$inc\": $layer may include ${MAY[$layer]:-nothing} only"$'\n'
        done < <(includes "$f")
    done
done
report layers_includes_run_down "${upward%$'\n'}"

# Inside a folder, includes run one way too: a file and its header are one
# room (quant.c with quant.h), and no chain of includes leads from a room back
# to itself (docs/design.md "Layers": the types several files share sit in a
# header below them).
loops=""
for dir in src/*/ cli/; do
    layer=$(basename "$dir")
    edges=""
    for f in "$dir"*.c "$dir"*.h; do
        [ -e "$f" ] || continue
        from=$(basename "${f%.*}")
        while read -r inc; do
            case "$inc" in
            "$layer"/*) inc=${inc#"$layer"/} ;;
            */* | promptkv.h | "") continue ;;
            esac
            [ -e "$dir$inc" ] && edges+="$from ${inc%.*}"$'\n'
        done < <(includes "$f")
    done
    cycle=$(printf '%s' "$edges" | tsort 2>&1 >/dev/null | sed -n 's/^tsort: \([^ :-][^ :]*\)$/\1/p' | tr '\n' ' ')
    [ -n "$cycle" ] && loops+="$dir: includes loop through ${cycle% }"$'\n'
done
report layers_includes_in_a_folder_run_one_way "${loops%$'\n'}"

# the public header stands alone: it includes no header of the tree
public=$(includes include/promptkv.h | sed 's/^/include\/promptkv.h includes /')
report layers_public_header_stands_alone "$public"

long=""
while read -r f; do
    # a generated table says so in its opening comment
    head -n 8 "$f" | grep -q 'Generated' && continue
    n=$(wc -l < "$f")
    [ "$n" -gt 800 ] && long+="$f: $n lines"$'\n'
done < <(find src cli include -name '*.[ch]' | sort)
report layers_no_file_over_800_lines "${long%$'\n'}"

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
