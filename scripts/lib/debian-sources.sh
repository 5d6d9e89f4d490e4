# Sourced by the setup scripts (bash): what the machine's own apt sources say, read-only.
# The system's apt configuration is only read, never changed.

# `deb` lines for the machine's own Debian suites (<codename>, <codename>-updates,
# <codename>-security, ...), from the one-line and deb822 sources it has configured; sorted,
# one per line, each as "deb [options] URI SUITE COMPONENTS".
machine_debian_sources() {
  local codename
  codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
  if [[ -z $codename ]]; then
    echo "no VERSION_CODENAME in /etc/os-release" >&2
    return 1
  fi
  local lists=() deb822=() f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [[ -f $f ]] && lists+=("$f")
  done
  for f in /etc/apt/sources.list.d/*.sources; do
    [[ -f $f ]] && deb822+=("$f")
  done
  {
    if ((${#lists[@]})); then
      awk -v codename="$codename" '
        { sub(/#.*/, "") }
        $1 == "deb" {
          i = 2; opts = ""
          if ($i ~ /^\[/) {
            while (i <= NF) { opts = opts (opts == "" ? "" : " ") $i; if ($(i) ~ /\]$/) break; i++ }
            i++
          }
          uri = $(i); suite = $(i + 1); comps = ""
          for (j = i + 2; j <= NF; j++) comps = comps " " $j
          if (suite == codename || index(suite, codename "-") == 1)
            print "deb" (opts == "" ? "" : " " opts) " " uri " " suite comps
        }' "${lists[@]}"
    fi
    if ((${#deb822[@]})); then
      awk -v codename="$codename" '
        function reset() { types = ""; uris = ""; suites = ""; comps = ""; signed = ""; enabled = "yes" }
        function flush(   n, m, i, j, U, S, opts) {
          if (types ~ /(^| )deb( |$)/ && tolower(enabled) != "no" && comps != "") {
            opts = (signed ~ /^\//) ? " [signed-by=" signed "]" : ""
            n = split(uris, U, /[ \t]+/); m = split(suites, S, /[ \t]+/)
            for (i = 1; i <= n; i++)
              for (j = 1; j <= m; j++)
                if (S[j] == codename || index(S[j], codename "-") == 1)
                  print "deb" opts " " U[i] " " S[j] " " comps
          }
          reset()
        }
        BEGIN { reset() }
        FNR == 1 { flush() }
        /^#/ { next }
        /^[ \t]*$/ { flush(); next }
        /^[ \t]/ { next }
        {
          colon = index($0, ":"); if (colon == 0) next
          key = tolower(substr($0, 1, colon - 1)); val = substr($0, colon + 1)
          gsub(/^[ \t]+|[ \t]+$/, "", val)
          if (key == "types") types = val
          else if (key == "uris") uris = val
          else if (key == "suites") suites = val
          else if (key == "components") comps = val
          else if (key == "signed-by") signed = val
          else if (key == "enabled") enabled = val
        }
        END { flush() }' "${deb822[@]}"
    fi
  } | sort -u
}
