// etcd, the server Kubernetes v1.34.4 is built against (go.etcd.io/etcd
// v3.6.4), run as upstream's server/main.go runs it.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
