package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
)

// mutant is one line of the file changed one way.
type mutant struct {
	line int // 0-based
	text string
	what string
}

// swaps are the operator mutations: each operator token becomes another.
var swaps = map[string]string{"==": "!=", "!=": "==", "<=": "<", ">=": ">", "<": "<=", ">": ">=", "&&": "||", "||": "&&", "++": "--"}

var ifLine = regexp.MustCompile(`^(\s*)(if|\} else if) (.*) \{$`)

// mutants returns the mutants of lines lo..hi (1-based, inclusive).
func mutants(src []string, lo, hi int) []mutant {
	var out []mutant
	for i, line := range src {
		if i+1 < lo || i+1 > hi {
			continue
		}
		code, _, _ := strings.Cut(line, "//")
		if strings.TrimSpace(code) == "" {
			continue
		}
		for at := 0; at < len(code); {
			op := operator(code, at)
			if op == "" {
				at++
				continue
			}
			out = append(out, mutant{i, line[:at] + swaps[op] + line[at+len(op):], fmt.Sprintf("%s -> %s at column %d", op, swaps[op], at+1)})
			at += len(op)
		}
		if m := ifLine.FindStringSubmatch(line); m != nil && !strings.Contains(m[3], ";") {
			out = append(out, mutant{i, m[1] + m[2] + " !(" + m[3] + ") {", "if negated"})
		}
		if s := strings.TrimSpace(line); s == "continue" || s == "break" {
			out = append(out, mutant{i, "", s + " dropped"})
		}
	}
	return out
}

// operator returns the operator token at code[at:], or "": a lone < or >
// that is part of <-, ->, << or >> is none.
func operator(code string, at int) string {
	for _, op := range []string{"==", "!=", "<=", ">=", "&&", "||", "++"} {
		if strings.HasPrefix(code[at:], op) {
			return op
		}
	}
	c := code[at]
	if c != '<' && c != '>' {
		return ""
	}
	prev, next := byte(0), byte(0)
	if at > 0 {
		prev = code[at-1]
	}
	if at+1 < len(code) {
		next = code[at+1]
	}
	if prev == '<' || prev == '>' || prev == '-' || next == '<' || next == '>' || next == '-' || next == '=' {
		return ""
	}
	return string(c)
}

func main() {
	file := flag.String("file", "", "the Go file to mutate")
	lines := flag.String("lines", "", "the lines to mutate, FROM-TO (default: all)")
	pkgs := flag.String("pkgs", "", "the packages to test, comma-separated, as go test takes them here (default: the file's own)")
	flag.Parse()
	if *file == "" {
		fmt.Fprintln(os.Stderr, "usage: go run ./scripts/mutants -file PATH [-lines FROM-TO] [-pkgs ./a,./b] [-- go test flags]")
		os.Exit(2)
	}
	testArgs := append([]string{"test", "-count", "1"}, flag.Args()...)
	if *pkgs == "" {
		testArgs = append(testArgs, "./"+filepath.ToSlash(filepath.Dir(*file)))
	} else {
		testArgs = append(testArgs, strings.Split(*pkgs, ",")...)
	}
	// Unmutated, the tests must pass: a run that fails for another
	// reason (a package path wrong, a flaky test) would count every
	// mutant killed.
	if out, err := exec.Command("go", testArgs...).CombinedOutput(); err != nil { // #nosec G204 -- the user's own test flags
		fmt.Fprintf(os.Stderr, "the tests fail before any mutation (go %s): %v\n%s", strings.Join(testArgs, " "), err, out)
		os.Exit(1)
	}
	orig, err := os.ReadFile(*file)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	src := strings.Split(string(orig), "\n")
	lo, hi := 1, len(src)
	if *lines != "" {
		from, to, _ := strings.Cut(*lines, "-")
		if lo, err = strconv.Atoi(from); err == nil {
			hi, err = strconv.Atoi(to)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "-lines wants FROM-TO:", err)
			os.Exit(2)
		}
	}
	restore := func() { _ = os.WriteFile(*file, orig, 0o644) } // #nosec G306 G703 -- the file the user named, as it was
	interrupted := make(chan os.Signal, 1)
	signal.Notify(interrupted, os.Interrupt, syscall.SIGTERM)
	go func() { <-interrupted; restore(); os.Exit(130) }()
	defer restore()

	dir := filepath.Dir(*file)
	var killed, lived, broken int
	for _, m := range mutants(src, lo, hi) {
		mutated := append([]string(nil), src...)
		mutated[m.line] = m.text
		if err := os.WriteFile(*file, []byte(strings.Join(mutated, "\n")), 0o644); err != nil { // #nosec G306 G703 -- the file the user named
			fmt.Fprintln(os.Stderr, err)
			break
		}
		if run(dir, "vet", ".") != nil {
			broken++ // does not compile: no mutant
			continue
		}
		if run("", testArgs...) == nil {
			lived++
			fmt.Printf("LIVED %s:%d %s\n\t%s\n\t%s\n", *file, m.line+1, m.what, strings.TrimSpace(src[m.line]), strings.TrimSpace(m.text))
		} else {
			killed++
		}
	}
	restore()
	fmt.Printf("%d killed, %d lived, %d did not compile\n", killed, lived, broken)
	if lived > 0 {
		os.Exit(1)
	}
}

// run runs go with args in dir, its output discarded.
func run(dir string, args ...string) error {
	cmd := exec.Command("go", args...) // #nosec G204 -- the user's own test flags
	cmd.Dir = dir
	return cmd.Run()
}
