module github.com/oncekv/oncekv/cmd/oncekv

go 1.26.0

// The library, at the version this module is released with. In a clone the
// workspace (go.work) uses the library next to it instead.
require github.com/oncekv/oncekv v0.1.0

require (
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/mitchellh/colorstring v0.0.0-20190213212951-d06e56a500db // indirect
	github.com/rivo/uniseg v0.4.7 // indirect
	github.com/schollz/progressbar/v3 v3.19.1
	github.com/spf13/cobra v1.10.2
	github.com/spf13/pflag v1.0.10 // indirect
	github.com/stretchr/testify v1.12.1
	go.etcd.io/bbolt v1.5.0
	golang.org/x/sys v0.50.0 // indirect
	golang.org/x/term v0.48.0
)
