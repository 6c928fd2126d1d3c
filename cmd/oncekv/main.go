// Command oncekv inspects, checks, sweeps and compacts oncekv databases, and
// runs the demo and the benchmark harness. Run `oncekv --help`.
package main

import (
	"os"

	"github.com/oncekv/oncekv/cmd/oncekv/internal/command"
)

func main() { os.Exit(command.Main(os.Args[1:], os.Stdout, os.Stderr)) }
