//go:build minfer_pkgconfig

package minfer

/*
#cgo pkg-config: minfer
#cgo CFLAGS: -DMINFER_GO_LINKED
#include "minfer_shim.h"
*/
import "C"

// Built with the minfer_pkgconfig tag: the wrappers call the library linked with `pkg-config minfer`.
const linked = true

func openLibrary(path string) error {
	return &Error{Code: ErrUnsupported, Msg: "built with the minfer_pkgconfig tag: libminfer is linked, not loaded"}
}
