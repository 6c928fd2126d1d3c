package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
)

const module = "github.com/oncekv/oncekv/"

// layer ranks the packages top to bottom as the design orders them.
func layer(p string) int {
	switch {
	case p == "kv" || strings.HasPrefix(p, "kv/"):
		return 4
	case p == "internal/record" || p == "internal/failpoint" || p == "internal/backoff" || p == "internal/loop":
		return 5
	case strings.HasPrefix(p, "internal/"):
		return 6
	case p == "idemhttp" || strings.HasPrefix(p, "idemhttp/") || p == "inspect" || p == "fingerprint":
		return 2
	case strings.HasPrefix(p, "cmd/") || strings.HasPrefix(p, "examples/") || p == "bench" || strings.HasPrefix(p, "otel") || strings.HasPrefix(p, "etcdkv"):
		return 1
	}
	return 3
}

func main() {
	format := flag.String("format", "dot", "dot or mermaid")
	md := flag.String("md", "", "with -format mermaid: rewrite the block between the pkggraph markers in this Markdown file")
	flag.Parse()
	var buf strings.Builder
	w := &buf
	args := append([]string{"list", "-f", `{{.ImportPath}} {{join .Imports " "}}`}, flag.Args()...)
	out, err := exec.Command("go", args...).Output() //nolint:gosec // a developer tool running go list on the arguments it was given
	if err != nil {
		fmt.Fprintln(os.Stderr, "pkggraph: go list:", err)
		os.Exit(1)
	}
	edges := map[string][]string{}
	var nodes []string
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || !strings.HasPrefix(f[0], module) {
			continue
		}
		from := collapse(strings.TrimPrefix(f[0], module))
		if skip(from) {
			continue
		}
		if !slices.Contains(nodes, from) {
			nodes = append(nodes, from)
		}
		for _, imp := range f[1:] {
			to, ok := strings.CutPrefix(imp, module)
			to = collapse(to)
			if ok && !skip(to) && to != from && !slices.Contains(edges[from], to) {
				edges[from] = append(edges[from], to)
			}
		}
	}
	slices.Sort(nodes)
	switch *format {
	case "mermaid":
		fmt.Fprintln(w, "flowchart TD")
		for _, n := range nodes {
			fmt.Fprintf(w, "  %s[%s]\n", id(n), n)
		}
		for _, n := range nodes {
			for _, to := range edges[n] {
				fmt.Fprintf(w, "  %s --> %s\n", id(n), id(to))
			}
		}
	default:
		fmt.Fprintln(w, "digraph oncekv {")
		fmt.Fprintln(w, `  rankdir=TB; node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=11]; edge [color="#888888"];`)
		colors := map[int]string{1: "#e8e8e8", 2: "#d6e9f8", 3: "#dff2d8", 4: "#fbe5c8", 5: "#f4f4f4", 6: "#f4f4f4"}
		for _, n := range nodes {
			fmt.Fprintf(w, "  %q [fillcolor=%q];\n", n, colors[layer(n)])
		}
		for _, n := range nodes {
			for _, to := range edges[n] {
				fmt.Fprintf(w, "  %q -> %q;\n", n, to)
			}
		}
		fmt.Fprintln(w, "}")
	}
	if *md == "" {
		fmt.Print(buf.String())
		return
	}
	doc, err := os.ReadFile(*md)
	if err != nil {
		fmt.Fprintln(os.Stderr, "pkggraph:", err)
		os.Exit(1)
	}
	const start, end = "<!-- pkggraph:start -->", "<!-- pkggraph:end -->"
	i, j := strings.Index(string(doc), start), strings.Index(string(doc), end)
	if i < 0 || j < i {
		fmt.Fprintf(os.Stderr, "pkggraph: %s has no %s ... %s block\n", *md, start, end)
		os.Exit(1)
	}
	text := string(doc[:i]) + start + "\n```mermaid\n" + buf.String() + "```\n" + string(doc[j:])
	if err := os.WriteFile(*md, []byte(text), 0o644); err != nil { //nolint:gosec // the file named on the command line
		fmt.Fprintln(os.Stderr, "pkggraph:", err)
		os.Exit(1)
	}
}

// skip leaves out the crash harness and the scripts, which would only
// clutter the picture.
func skip(p string) bool {
	return strings.Contains(p, "internal/crashtest") || strings.HasPrefix(p, "scripts")
}

// collapse draws a command's internal packages as the command.
func collapse(p string) string {
	if i := strings.Index(p, "/internal/"); i > 0 && strings.HasPrefix(p, "cmd/") {
		return p[:i]
	}
	return p
}

func id(p string) string { return strings.NewReplacer("/", "_", "-", "_", ".", "_").Replace(p) }
