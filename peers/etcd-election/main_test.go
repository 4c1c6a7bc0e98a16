package main

import (
	"reflect"
	"testing"
)

// The backend address rule of README.md: --etcd wins; otherwise every --redis URL's host:port.
func TestEndpointsOf(t *testing.T) {
	got := endpointsOf("", []string{"tcp://127.0.0.1:2379/", "tcp://127.0.0.1:2479/"})
	if want := []string{"127.0.0.1:2379", "127.0.0.1:2479"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("from --redis: got %v, want %v", got, want)
	}
	got = endpointsOf("127.0.0.2:1,127.0.0.3:2", []string{"tcp://127.0.0.1:2379/"})
	if want := []string{"127.0.0.2:1", "127.0.0.3:2"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("--etcd: got %v, want %v", got, want)
	}
}
