/*
 * The public functions of include/stemdot.h that enter Go: each refuses the call with
 * STEMDOT_ERR_FORKED in a forked child (see shim.c), where entering the Go runtime can
 * hang, and otherwise calls its Go export stemdot_go_<name> (exports.go, resident.go).
 * A refused call that makes a handle stores 0 in *out, as a failed one does.
 */
#include "shim.h"

#define STEMDOT_WRAP(name, params, args)                            \
    stemdot_status stemdot_##name params {                          \
        if (stemdot_capi_forked) {                                  \
            return stemdot_capi_refuse_forked("stemdot_" #name);    \
        }                                                           \
        return stemdot_go_##name args;                              \
    }

#define STEMDOT_WRAP_HANDLE(name, params, args)                     \
    stemdot_status stemdot_##name params {                          \
        if (stemdot_capi_forked) {                                  \
            if (out != NULL) {                                      \
                *out = 0;                                           \
            }                                                       \
            return stemdot_capi_refuse_forked("stemdot_" #name);    \
        }                                                           \
        return stemdot_go_##name args;                              \
    }

STEMDOT_GO_FUNCTIONS(STEMDOT_WRAP, STEMDOT_WRAP_HANDLE)

int stemdot_cli_main(int argc, char **argv, const stemdot_cli_backend *backend) {
    if (stemdot_capi_forked) {
        stemdot_capi_refuse_forked("stemdot_cli_main");
        return 1;
    }
    return stemdot_go_cli_main(argc, argv, (stemdot_cli_backend *)backend);
}
