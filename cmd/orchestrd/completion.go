package main

// orchestrd completion bash|zsh|fish: a completion script made from the
// command table and the flag sets the commands themselves define, so that
// it never goes stale.

import (
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/api/render"
)

const completionUsage = `orchestrd completion bash|zsh|fish

Prints a completion script for the shell: the commands, their flags (as
the commands define them), subcommands, the values of jobs --state,
approvals --source and prompt --mode, directories and files where a flag
takes one, and the ids of jobs and pending approvals (asked of the daemon
as you type). Load it:

  source <(orchestrd completion bash)      # in ~/.bashrc
  source <(orchestrd completion zsh)       # in ~/.zshrc, after compinit
  orchestrd completion fish > ~/.config/fish/completions/orchestrd.fish`

// completionShells are the shells completion writes for.
var completionShells = map[string]func(io.Writer, []complCmd){"bash": writeBash, "zsh": writeZsh, "fish": writeFish}

// completionShellNames are completionShells' names (the command table
// cannot read completionShells itself: its writers read the table).
var completionShellNames = map[string]bool{"bash": true, "zsh": true, "fish": true}

func cmdCompletion(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("completion")
	pos, code, ok := parseInterspersed(fs, completionUsage, args, stdout, stderr)
	if !ok {
		return code
	}
	if len(pos) != 1 || completionShells[pos[0]] == nil {
		return usageError(fs, completionUsage, stderr, "want one shell: bash, zsh or fish")
	}
	completionShells[pos[0]](stdout, completionModel())
	return exitOK
}

// flagSpy, when set, is told of every flag set newFlags makes: how
// completion learns a command's flags from the command itself.
var flagSpy func(*flag.FlagSet)

// complFlag is a flag as completion sees it.
type complFlag struct {
	name   string
	arg    string   // its value's placeholder (DIR, FILE, N); "" for a bool flag
	usage  string   // its first line of help
	values []string // the values it takes, when they are known and few
}

// complCmd is a command as completion sees it: its flags, and those of a
// subcommand that has flags of its own (approvals rules).
type complCmd struct {
	name, summary string
	flags         []complFlag
	subs          []string               // subcommand paths: "rules", "rules rm"
	subFlags      map[string][]complFlag // by first subcommand, when its own
	ids           string                 // "jobs" or "approvals": its argument is such an id
	rest          bool                   // after --, a command line (run)
}

// flagValues are the values of the flags whose values are few, by
// "command flag".
func flagValues() map[string][]string {
	states := make([]string, len(allStates))
	for i, s := range allStates {
		states[i] = string(s)
	}
	return map[string][]string{
		"jobs state":       states,
		"approvals source": approvalSources,
		"prompt mode":      {api.ModeDefault, api.ModeAcceptEdits, api.ModeBypass, api.ModePlan},
	}
}

// completionModel asks each command for its flags by running it with
// --help (output discarded) while flagSpy records the flag sets it makes.
func completionModel() []complCmd {
	values := flagValues()
	capture := func(c command, args ...string) *flag.FlagSet {
		var last *flag.FlagSet
		flagSpy = func(fs *flag.FlagSet) { last = fs }
		defer func() { flagSpy = nil }()
		c.run(append(args, "--help"), io.Discard, io.Discard)
		return last
	}
	flagsOf := func(cmd string, fs *flag.FlagSet) []complFlag {
		out := []complFlag{{name: "help", usage: "show the options"}}
		if fs == nil {
			return out
		}
		fs.VisitAll(func(f *flag.Flag) {
			arg, usage := flag.UnquoteUsage(f)
			if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
				arg = ""
			} else if arg == "" {
				arg = "VALUE"
			}
			usage, _, _ = strings.Cut(usage, "\n")
			out = append(out, complFlag{name: f.Name, arg: arg, usage: usage, values: values[cmd+" "+f.Name]})
		})
		sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
		return out
	}
	var cmds []complCmd
	for _, c := range commands {
		if c.hidden {
			continue
		}
		cc := complCmd{name: c.name, summary: c.summary, subs: c.subs, ids: c.ids, rest: c.name == "run"}
		if c.name != "runner" { // the runner's flags are its own package's
			main := capture(c)
			cc.flags = flagsOf(c.name, main)
			for _, s := range c.subs {
				first, _, _ := strings.Cut(s, " ")
				if fs := capture(c, first); fs != nil && fs != main && fs.Name() != c.name {
					if cc.subFlags == nil {
						cc.subFlags = map[string][]complFlag{}
					}
					cc.subFlags[first] = flagsOf(c.name, fs)
				}
			}
		} else {
			cc.flags = flagsOf(c.name, nil)
		}
		if c.name == "help" {
			cc.subs = commandNames()
		}
		cmds = append(cmds, cc)
	}
	return cmds
}

// globalComplFlags are the flags before the command.
func globalComplFlags() []complFlag {
	fs, _, _ := globalFlags()
	var out []complFlag
	fs.VisitAll(func(f *flag.Flag) {
		arg, usage := flag.UnquoteUsage(f)
		if f.Name == "version" {
			arg = ""
		}
		out = append(out, complFlag{name: f.Name, arg: arg, usage: usage})
	})
	return append(out, complFlag{name: "help", usage: "list the commands"})
}

// dashed is a flag as it is typed: -n for a one-letter flag, --name
// otherwise (Go's flag package takes either).
func dashed(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// argKind is how a flag's value completes: "dir", "file", or "" (any word).
func argKind(arg string) string {
	switch {
	case strings.Contains(arg, "DIR"):
		return "dir"
	case strings.Contains(arg, "FILE") || arg == "PATH":
		return "file"
	}
	return ""
}

// children are the words that may follow path (the command and the
// subcommands before) among c's subcommand paths.
func (c complCmd) children(path string) []string {
	var out []string
	for _, s := range c.subs {
		words := strings.Fields(s)
		if strings.Join(words[:len(words)-1], " ") == path {
			out = append(out, words[len(words)-1])
		}
	}
	return out
}

// ---- bash ----

func writeBash(w io.Writer, cmds []complCmd) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	p(`# bash completion for orchestrd, made by "orchestrd completion bash": load it with
#   source <(orchestrd completion bash)
# or save it as ~/.local/share/bash-completion/completions/orchestrd.

# _orchestrd_flags CMD SUB: the flags of CMD (or of its subcommand SUB).
_orchestrd_flags() {
	case "$1 $2" in
`)
	names := func(fl []complFlag) string {
		var s []string
		for _, f := range fl {
			s = append(s, dashed(f.name))
		}
		return strings.Join(s, " ")
	}
	for _, c := range cmds {
		for _, sub := range sortedKeys(c.subFlags) {
			p("\t%q) echo %q ;;\n", c.name+" "+sub, names(c.subFlags[sub]))
		}
		p("\t%q*) echo %q ;;\n", c.name+" ", names(c.flags))
	}
	p("\t*) echo %q ;;\n\tesac\n}\n\n", names(globalComplFlags()))

	p(`# _orchestrd_value CMD SUB FLAG: how FLAG's value completes: "-" when it
# takes none, dir, file, word (anything), or "=" and its values.
_orchestrd_value() {
	local f=${3#-}
	f=${f#-}
	case "$1 $2 $f" in
`)
	kind := func(f complFlag) string {
		switch {
		case f.arg == "":
			return "-"
		case len(f.values) > 0:
			return "=" + strings.Join(f.values, " ")
		case argKind(f.arg) != "":
			return argKind(f.arg)
		}
		return "word"
	}
	for _, c := range cmds {
		for _, sub := range sortedKeys(c.subFlags) {
			for _, f := range c.subFlags[sub] {
				p("\t%q) echo %q ;;\n", c.name+" "+sub+" "+f.name, kind(f))
			}
		}
		for _, f := range c.flags {
			p("\t%q*%q) echo %q ;;\n", c.name+" ", " "+f.name, kind(f))
		}
	}
	for _, f := range globalComplFlags() {
		p("\t%q) echo %q ;;\n", "  "+f.name, kind(f))
	}
	p("\tesac\n}\n\n")

	p(`# _orchestrd_ids BIN HOME jobs|approvals: the ids the daemon lists.
_orchestrd_ids() {
	"$1" ${2:+--home "$2"} "$3" 2>/dev/null | awk 'NR > 1 { print $1 }'
}

_orchestrd() {
	local cur=${COMP_WORDS[COMP_CWORD]} prev= flag= cmd= home= w kind i
	local -a args=()
	COMPREPLY=()
	(( COMP_CWORD > 0 )) && prev=${COMP_WORDS[COMP_CWORD-1]}
	for (( i = 1; i < COMP_CWORD; i++ )); do
		w=${COMP_WORDS[i]}
		case $w in
		--)
			if [[ $cmd == run ]]; then
				compopt -o default 2>/dev/null
				return 0
			fi ;;
		-*)
			kind=$(_orchestrd_value "$cmd" "${args[0]}" "$w")
			if [[ -n $kind && $kind != - ]]; then
				(( i++ ))
				[[ ${COMP_WORDS[i]} == = ]] && (( i++ ))
				[[ ${w#-} == home || ${w#-} == -home ]] && home=${COMP_WORDS[i]}
			fi ;;
		=) ;;
		*)
			if [[ -z $cmd ]]; then cmd=$w; else args+=("$w"); fi ;;
		esac
	done
	# The flag whose value this is: --state f, --state=f (bash makes "="
	# a word of its own), or --state=f as one word.
	local pre=
	flag=$prev
	[[ $prev == = ]] && (( COMP_CWORD > 1 )) && flag=${COMP_WORDS[COMP_CWORD-2]}
	[[ $cur == = ]] && { flag=$prev; cur=; }
	[[ $cur == -*=* ]] && { flag=${cur%%%%=*}; pre=$flag=; cur=${cur#*=}; }
	if [[ $flag == -* ]]; then
		kind=$(_orchestrd_value "$cmd" "${args[0]}" "$flag")
		case $kind in
		"" | -) ;;
		dir) compopt -o filenames 2>/dev/null; mapfile -t COMPREPLY < <(compgen -d -- "$cur") ;;
		file) compopt -o filenames 2>/dev/null; mapfile -t COMPREPLY < <(compgen -f -- "$cur") ;;
		=*) mapfile -t COMPREPLY < <(compgen -W "${kind#=}" -- "$cur") ;;
		esac
		if [[ -n $kind && $kind != - ]]; then
			[[ -n $pre ]] && COMPREPLY=("${COMPREPLY[@]/#/$pre}")
			return 0
		fi
	fi
	if [[ $cur == -* ]]; then
		mapfile -t COMPREPLY < <(compgen -W "$(_orchestrd_flags "$cmd" "${args[0]}")" -- "$cur")
		return 0
	fi
	local words=
	case "$cmd ${args[*]}" in
`)
	var top []string
	for _, c := range cmds {
		top = append(top, c.name)
	}
	p("\t\" \") words=%q ;;\n", strings.Join(top, " "))
	for _, c := range cmds {
		paths := map[string]bool{c.name: true}
		for _, s := range c.subs {
			words := strings.Fields(s)
			for i := range words {
				paths[strings.Join(append([]string{c.name}, words[:i]...), " ")] = true
			}
		}
		for _, path := range sortedKeys(paths) {
			// The key is "$cmd ${args[*]}": "approvals " alone, "approvals rules".
			rel := strings.TrimPrefix(strings.TrimPrefix(path, c.name), " ")
			key := c.name + " " + rel
			if next := c.children(rel); len(next) > 0 {
				p("\t%q) words=%q ;;\n", key, strings.Join(next, " "))
			}
		}
		if c.ids != "" {
			p("\t%q) words=$(_orchestrd_ids \"${COMP_WORDS[0]}\" \"$home\" %s) ;;\n", c.name+" ", c.ids)
		}
	}
	p(`	esac
	mapfile -t COMPREPLY < <(compgen -W "$words" -- "$cur")
}

complete -F _orchestrd orchestrd
`)
}

// ---- zsh ----

// zshQuote quotes s for a single-quoted zsh word inside an _arguments
// spec's [description]: ' as '\”, brackets and colons escaped.
func zshQuote(s string) string {
	s = strings.NewReplacer(`\`, `\\`, "[", `\[`, "]", `\]`, ":", `\:`).Replace(s)
	return strings.ReplaceAll(s, "'", `'\''`)
}

// zshSpec is a flag as an _arguments spec.
func zshSpec(f complFlag) string {
	desc := zshQuote(render.Cut(f.usage, 70))
	if f.arg == "" {
		return fmt.Sprintf("'%s[%s]'", dashed(f.name), desc)
	}
	action := ""
	switch {
	case len(f.values) > 0:
		action = "(" + strings.Join(f.values, " ") + ")"
	case argKind(f.arg) == "dir":
		action = "_files -/"
	case argKind(f.arg) == "file":
		action = "_files"
	}
	return fmt.Sprintf("'%s=[%s]:%s:%s'", dashed(f.name), desc, zshQuote(f.arg), action)
}

func writeZsh(w io.Writer, cmds []complCmd) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	specs := func(fl []complFlag) string {
		var s []string
		for _, f := range fl {
			s = append(s, zshSpec(f))
		}
		return strings.Join(s, " \\\n\t\t\t\t")
	}
	p(`#compdef orchestrd
# zsh completion for orchestrd, made by "orchestrd completion zsh": load it with
#   source <(orchestrd completion zsh)      (after compinit)
# or save it as _orchestrd in a directory of $fpath.

# _orchestrd_ids [COMPADD-OPTIONS] jobs|approvals: the ids the daemon lists
# (_arguments puts compadd's options first).
_orchestrd_ids() {
	local -a home ids
	local i=${words[(I)--home]}
	if (( i )); then
		home=(--home ${words[i+1]})
	elif [[ -n $_orchestrd_home ]]; then
		home=(--home $_orchestrd_home)
	fi
	ids=(${${(f)"$(_call_program ids command $service $home ${argv[-1]} 2>/dev/null)"}[2,-1]%%%% *})
	compadd "${(@)argv[1,-2]}" -a ids
}

_orchestrd() {
	local curcontext=$curcontext state line ret=1
	typeset -A opt_args
	local -a commands
	commands=(
`)
	for _, c := range cmds {
		p("\t\t'%s:%s'\n", c.name, strings.ReplaceAll(c.summary, "'", `'\''`))
	}
	p("\t)\n\t_arguments -C \\\n\t\t%s \\\n\t\t'(-): :->command' \\\n\t\t'(-)*:: :->args' && return 0\n", specs(globalComplFlags()))
	p(`	local _orchestrd_home=${opt_args[--home]} # a --home before the command, for _orchestrd_ids
	case $state in
	command)
		_describe -t commands 'orchestrd command' commands && ret=0 ;;
	args)
		curcontext=${curcontext%%%%:*}-$words[1]:
		case $words[1] in
`)
	for _, c := range cmds {
		p("\t\t%s)\n", c.name)
		pos := func(path string, n int) string {
			if next := c.children(path); len(next) > 0 {
				return fmt.Sprintf(" \\\n\t\t\t\t'%d: :(%s)'", n, strings.Join(next, " "))
			}
			return ""
		}
		for _, sub := range sortedKeys(c.subFlags) {
			p("\t\t\tif [[ $words[2] == %s ]]; then\n\t\t\t\t_arguments %s%s && ret=0\n\t\t\t\treturn ret\n\t\t\tfi\n",
				sub, specs(c.subFlags[sub]), pos(sub, 2))
		}
		extra := pos("", 1)
		switch {
		case c.ids != "":
			extra = fmt.Sprintf(" \\\n\t\t\t\t'1:%s:_orchestrd_ids %s'", strings.TrimSuffix(c.ids, "s"), c.ids)
		case c.rest:
			extra = " \\\n\t\t\t\t'*::command:_normal'"
		}
		p("\t\t\t_arguments %s%s && ret=0 ;;\n", specs(c.flags), extra)
	}
	p(`		esac ;;
	esac
	return ret
}

if [[ $funcstack[1] == _orchestrd ]]; then
	_orchestrd "$@"
else
	compdef _orchestrd orchestrd
fi
`)
}

// ---- fish ----

// fishQuote quotes s as a single-quoted fish word.
func fishQuote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, "'", `\'`).Replace(s) + "'"
}

func writeFish(w io.Writer, cmds []complCmd) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	valued := map[string]bool{}
	for _, c := range cmds {
		for _, fl := range append([][]complFlag{c.flags}, mapValues(c.subFlags)...) {
			for _, f := range fl {
				if f.arg != "" {
					valued[f.name] = true
				}
			}
		}
	}
	p(`# fish completion for orchestrd, made by "orchestrd completion fish": save it with
#   orchestrd completion fish > ~/.config/fish/completions/orchestrd.fish

# The flags that take a value (their value is not a command or an argument).
set -g __orchestrd_valued %s

# __orchestrd_args: the words after orchestrd but flags and their values,
# up to --.
function __orchestrd_args
	set -l toks (commandline -opc)
	set -e toks[1]
	set -l skip 0
	for t in $toks
		if test $skip = 1
			set skip 0
			continue
		end
		switch $t
			case --
				return
			case '-*=*'
			case '-*'
				if contains -- (string replace -r -- '^--?' '' $t) $__orchestrd_valued
					set skip 1
				end
			case '*'
				echo $t
		end
	end
end

# __orchestrd_at WORDS...: the words so far are these.
function __orchestrd_at
	set -l a (__orchestrd_args)
	test "$a" = "$argv"
end

# __orchestrd_in CMD [SUB]: the command is CMD (and its first word SUB).
function __orchestrd_in
	set -l a (__orchestrd_args)
	test "$a[1]" = "$argv[1]"; or return 1
	set -q argv[2]; or return 0
	test "$a[2]" = "$argv[2]"
end

# __orchestrd_ids jobs|approvals: the ids the daemon lists.
function __orchestrd_ids
	set -l toks (commandline -opc)
	set -l home
	for i in (seq 2 (count $toks))
		if contains -- $toks[$i] --home -home; and test $i -lt (count $toks)
			set home --home $toks[(math $i + 1)]
		else if string match -qr -- '^--?home=' $toks[$i]
			set home --home (string replace -r -- '^--?home=' '' $toks[$i])
		end
	end
	command $toks[1] $home $argv[1] 2>/dev/null | tail -n +2 | string replace -r -- '\s.*' ''
end

complete -c orchestrd -f
`, strings.Join(sortedKeys(valued), " "))
	flagLine := func(cond string, f complFlag) {
		opt := "-l"
		if len(f.name) == 1 {
			opt = "-s"
		}
		line := fmt.Sprintf("complete -c orchestrd -n %s %s %s", fishQuote(cond), opt, f.name)
		switch {
		case f.arg == "":
		case len(f.values) > 0:
			line += " -x -a " + fishQuote(strings.Join(f.values, " "))
		case argKind(f.arg) == "dir":
			line += " -x -a '(__fish_complete_directories)'"
		case argKind(f.arg) == "file":
			line += " -r -F"
		default:
			line += " -x"
		}
		p("%s -d %s\n", line, fishQuote(render.Cut(f.usage, 70)))
	}
	for _, f := range globalComplFlags() {
		flagLine("__orchestrd_at", f)
	}
	for _, c := range cmds {
		p("complete -c orchestrd -n __orchestrd_at -a %s -d %s\n", c.name, fishQuote(render.Cut(c.summary, 70)))
	}
	for _, c := range cmds {
		cond := "__orchestrd_in " + c.name
		for _, sub := range sortedKeys(c.subFlags) {
			for _, f := range c.subFlags[sub] {
				flagLine("__orchestrd_in "+c.name+" "+sub, f)
			}
			cond += "; and not __orchestrd_in " + c.name + " " + sub
		}
		for _, f := range c.flags {
			flagLine(cond, f)
		}
		paths := map[string]bool{"": true}
		for _, s := range c.subs {
			words := strings.Fields(s)
			for i := range words {
				paths[strings.Join(words[:i], " ")] = true
			}
		}
		for _, path := range sortedKeys(paths) {
			if next := c.children(path); len(next) > 0 {
				p("complete -c orchestrd -n %s -a %s\n", fishQuote(strings.TrimSpace("__orchestrd_at "+c.name+" "+path)), fishQuote(strings.Join(next, " ")))
			}
		}
		if c.ids != "" {
			p("complete -c orchestrd -n %s -a '(__orchestrd_ids %s)'\n", fishQuote("__orchestrd_at "+c.name), c.ids)
		}
		if c.rest {
			p("complete -c orchestrd -n %s -F\n", fishQuote("__orchestrd_in "+c.name+"; and contains -- -- (commandline -opc)"))
		}
	}
}

func mapValues(m map[string][]complFlag) [][]complFlag {
	var out [][]complFlag
	for _, k := range sortedKeys(m) {
		out = append(out, m[k])
	}
	return out
}
