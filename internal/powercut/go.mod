module github.com/oncekv/oncekv/internal/powercut

go 1.26.0

require (
	github.com/hanwen/go-fuse/v2 v2.12.1
	go.uber.org/goleak v1.3.0
)

require golang.org/x/sys v0.28.0 // indirect
