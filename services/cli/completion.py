"""`heddle completion bash|zsh`: a static completion script made from the argparse parser
itself, so a new command or option is completed without touching this file. zsh loads the
bash function through ``bashcompinit``, which every zsh ships.

    source <(heddle completion bash)     # or, in ~/.zshrc: source <(heddle completion zsh)
"""

from __future__ import annotations

import argparse

SHELLS = ("bash", "zsh")
# Options that take a value: the word after one is never the command's name.
VALUED = ("--url", "--token", "--token-file")
# Commands whose positional argument is a file or a directory.
FILE_ARGS = ("submit", "register", "backup", "restore")

BASH = """\
# heddle completion for {shell} (made by `heddle completion {shell}`)
_heddle() {{
  local cur=${{COMP_WORDS[COMP_CWORD]}} prev=${{COMP_WORDS[COMP_CWORD-1]}} cmd="" i
  for ((i = 1; i < COMP_CWORD; i++)); do
    case ${{COMP_WORDS[i]}} in
      {valued}) ((i++)) ;;
      -*) ;;
      *) cmd=${{COMP_WORDS[i]}}; break ;;
    esac
  done
  case $prev in
    --token-file|--data-dir|--dir) COMPREPLY=($(compgen -f -- "$cur")); return ;;
    --url|--token) return ;;
  esac
  case $cmd in
{cases}
  esac
}}
complete -o default -F _heddle heddle
"""


def _options(parser: argparse.ArgumentParser) -> list[str]:
    return sorted({s for a in parser._actions for s in a.option_strings if s.startswith("--")})


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _case(name: str, words: list[str], files: bool) -> str:
    flag = "-f " if files else ""
    pattern = '""' if name == "" else name
    return f'    {pattern}) COMPREPLY=($(compgen {flag}-W "{" ".join(words)}" -- "$cur")) ;;'


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    commands = _subcommands(parser)
    cases = [_case("", [*commands, *_options(parser)], files=False)]
    for name, sub in commands.items():
        words = _options(sub) + list(_subcommands(sub))
        cases.append(_case(name, words, files=name in FILE_ARGS))
    text = BASH.format(shell=shell, valued="|".join(VALUED), cases="\n".join(cases))
    if shell == "zsh":
        text = "autoload -U +X bashcompinit && bashcompinit\n" + text
    return text
