# shellcheck shell=bash
# Helpers shared by the worker scripts (sourced, not run). Pure bash: the image has no jq.

# A JSON string literal for $1 (quotes, backslashes and control characters escaped).
json_str() {
  local s=$1 bs=$'\\' q='"' re=$'[\x01-\x1f]' c hex
  s=${s//"$bs"/"$bs$bs"}
  s=${s//"$q"/"$bs$q"}
  s=${s//$'\n'/"${bs}n"}
  s=${s//$'\r'/"${bs}r"}
  s=${s//$'\t'/"${bs}t"}
  while [[ $s =~ $re ]]; do
    c=${BASH_REMATCH[0]}
    printf -v hex '%su%04x' "$bs" "'$c"
    s=${s//"$c"/"$hex"}
  done
  printf '"%s"' "$s"
}

file_size() { stat -c %s -- "$1" 2>/dev/null || printf '0'; }
