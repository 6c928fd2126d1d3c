// Package etcdkv is an oncekv backend over etcd v3.
package etcdkv
