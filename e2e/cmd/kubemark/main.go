// kubemark's hollow node (the real kubelet with a fake container runtime,
// or a hollow kube-proxy), built from the pinned k8s.io/kubernetes exactly
// as upstream's cmd/kubemark/hollow-node.go builds it.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kubemark/app"
)

func main() {
	command := app.NewHollowNodeCommand()
	code := cli.Run(command)
	os.Exit(code)
}
