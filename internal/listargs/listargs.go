// Package listargs reads Megatron-LM's list flags with Go's flag package: Megatron's
// argparse flags with nargs='*' or '+' take the words that follow them ("--data-path
// 0.3 A 0.7 B", "--json-keys text title"), which the flag package would take for
// positional arguments. Join rewrites them into one value of space-separated words.
package listargs

import "strings"

// Join rewrites "--name a b c" (and "-name a b c") into "--name=a b c" for each of
// names: the words up to the next argument that starts with "-". A list flag with no
// word after it is left for the flag package to report.
func Join(args []string, names ...string) []string {
	for _, name := range names {
		args = join(args, name)
	}
	return args
}

func join(args []string, name string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a != "-"+name && a != "--"+name {
			out = append(out, a)
			continue
		}
		var words []string
		for i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
			i++
			words = append(words, args[i])
		}
		if len(words) == 0 {
			out = append(out, a) // let the flag package report the missing value
			continue
		}
		out = append(out, "--"+name+"="+strings.Join(words, " "))
	}
	return out
}
