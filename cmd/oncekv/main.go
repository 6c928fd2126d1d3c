package main

import (
	"os"

	"github.com/oncekv/oncekv/cmd/oncekv/internal/command"
)

func main() { os.Exit(command.Main(os.Args[1:], os.Stdout, os.Stderr)) }
