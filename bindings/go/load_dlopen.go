//go:build !minfer_pkgconfig

package minfer

/*
#cgo LDFLAGS: -ldl
#include "minfer_shim.h"
*/
import "C"

import "unsafe"

// The default build: minfer_shim.c fills the function table with dlopen/dlsym.
const linked = false

func openLibrary(path string) error {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var msg *C.char
	switch C.minfer_go_load(cpath, &msg) {
	case 0:
		return nil
	case 1:
		return &Error{Code: ErrIO, Msg: "cannot load " + path + ": " + takeMessage(msg)}
	default:
		return &Error{Code: ErrUnsupported, Msg: path + ": " + takeMessage(msg) +
			" (the library is older than the header of these bindings)"}
	}
}

func takeMessage(msg *C.char) string {
	defer C.free(unsafe.Pointer(msg))
	return C.GoString(msg)
}
