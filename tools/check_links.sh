#!/usr/bin/env bash
# Checks that every relative link in README.md and docs/*.md resolves.
#
#   tools/check_links.sh [REPO_ROOT]     (default: this script's parent directory)
#
# A link is [text](target), ![alt](target) or a reference definition "[name]: target". Targets
# with a scheme (http:, https:, mailto:, ...) are left alone. Any other target is taken relative
# to the file that holds it, its #fragment stripped, and must exist. A fragment into a .md file,
# or a bare #fragment (the same file), must name a heading of that file by its GitHub anchor:
# the heading's text lowercased, markup and punctuation other than '-' and '_' dropped, spaces
# turned into '-', and -1, -2, ... added to repeats (an <a name=...> or id="..." counts too).
# Non-ASCII is kept, less the General Punctuation block (dashes, curly quotes): close to GitHub.
# Links inside fenced code blocks and `code spans` are not links and are skipped.
#
# Prints every broken link as FILE:LINE: target and exits 1; otherwise prints
# "check_links: N links in M files, all resolve". Needs only bash, coreutils, grep, sed and awk.
set -euo pipefail
root="${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
[[ -d "$root" ]] || { echo "check_links: $root is not a directory" >&2; exit 2; }
cd "$root"
export LC_ALL=C

files=()
[[ -f README.md ]] && files+=(README.md)
for f in docs/*.md; do [[ -f "$f" ]] && files+=("$f"); done
((${#files[@]} > 0)) || { echo "check_links: no README.md or docs/*.md under $root" >&2; exit 2; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Prints "LINE<TAB>TARGET" for every link of a Markdown file.
links_of() {
  awk '
    /^[ \t]*(```|~~~)/ { fence = !fence; next }
    fence { next }
    {
      line = $0
      # A reference definition: [name]: target
      if (match(line, /^[ \t]*\[[^]]+\]:[ \t]+[^ \t]+/)) {
        def = substr(line, RSTART, RLENGTH)
        sub(/^[ \t]*\[[^]]+\]:[ \t]+/, "", def)
        gsub(/^<|>$/, "", def)
        print NR "\t" def
        next
      }
      gsub(/`[^`]*`/, "", line)                       # code spans are not links
      while (match(line, /\]\([^)]*\)/)) {
        target = substr(line, RSTART + 2, RLENGTH - 3)
        line = substr(line, RSTART + RLENGTH)
        sub(/^[ \t]+/, "", target)
        if (target ~ /^</) { sub(/^</, "", target); sub(/>.*$/, "", target) }
        else sub(/[ \t].*$/, "", target)                 # drop a "title"
        if (target != "") print NR "\t" target
      }
    }' "$1"
}

# Prints the GitHub anchors of a Markdown file's headings, one per line.
anchors_of() {
  awk '
    /^[ \t]*(```|~~~)/ { fence = !fence; next }
    fence { next }
    /^##?#?#?#?#?[ \t]/ {   # (no {1,6}: mawk lacks intervals)
      h = $0
      sub(/^#+[ \t]+/, "", h); sub(/[ \t]+#+[ \t]*$/, "", h); sub(/[ \t]+$/, "", h)
      # [text](url) -> text; images and HTML tags go.
      while (match(h, /!?\[[^]]*\]\([^)]*\)/)) {
        piece = substr(h, RSTART, RLENGTH)
        sub(/^!?\[/, "", piece); sub(/\]\(.*$/, "", piece)
        h = substr(h, 1, RSTART - 1) piece substr(h, RSTART + RLENGTH)
      }
      gsub(/<[^>]*>/, "", h)
      gsub(/\342[\200\201][\200-\277]/, "", h)      # U+2000-U+207F: dashes, quotes, ...
      h = tolower(h)
      out = ""
      for (i = 1; i <= length(h); i++) {
        c = substr(h, i, 1)
        if (c ~ /[a-z0-9_-]/) out = out c
        else if (c == " ") out = out "-"
        else if (c > "\177") out = out c               # non-ASCII: kept (letters, mostly)
      }
      n = seen[out]++
      print (n ? out "-" n : out)
    }
    {
      rest = $0
      while (match(rest, /(name|id)="[^"]+"/)) {
        a = substr(rest, RSTART, RLENGTH); sub(/^[a-z]+="/, "", a); sub(/"$/, "", a)
        print a
        rest = substr(rest, RSTART + RLENGTH)
      }
    }' "$1"
}

# The anchors of a file, computed once.
anchor_file() {
  local key
  key=$(printf '%s' "$1" | sed 's|[^A-Za-z0-9._-]|_|g')
  [[ -f "$tmp/$key" ]] || anchors_of "$1" > "$tmp/$key"
  printf '%s\n' "$tmp/$key"
}

count=0
broken=0
for file in "${files[@]}"; do
  dir=$(dirname "$file")
  while IFS=$'\t' read -r line target; do
    [[ "$target" =~ ^[A-Za-z][A-Za-z0-9+.-]*: ]] && continue    # http:, https:, mailto:, ...
    count=$((count + 1))
    path="${target%%#*}"
    fragment=""
    [[ "$target" == *"#"* ]] && fragment="${target#*#}"
    if [[ -z "$path" ]]; then
      resolved="$file"
    else
      # Percent-encoded spaces are the only escapes these docs would need.
      resolved="$dir/${path//%20/ }"
      if [[ ! -e "$resolved" ]]; then
        echo "$file:$line: $target"
        broken=$((broken + 1))
        continue
      fi
    fi
    if [[ -n "$fragment" && "$resolved" == *.md && -f "$resolved" ]]; then
      if ! grep -qxF -- "$fragment" "$(anchor_file "$resolved")"; then
        echo "$file:$line: $target (no heading with the anchor #$fragment in $resolved)"
        broken=$((broken + 1))
      fi
    fi
  done < <(links_of "$file")
done

if ((broken > 0)); then
  echo "check_links: $broken of $count links in ${#files[@]} files do not resolve" >&2
  exit 1
fi
echo "check_links: $count links in ${#files[@]} files, all resolve"
