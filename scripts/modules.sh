# Sourced by .ci/run and the scripts that walk every package: the package
# patterns of every module of the workspace. In a workspace ./... stays in
# the root module, so each other module is named. (The Makefile keeps the
# same list in its MODULES.)
MODULES=(./... ./cmd/oncekv/... ./examples/... ./bench/chart/... ./etcdkv/... ./otel/... ./internal/powercut/...)
