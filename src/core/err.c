/* Status names and the error-buffer helper (see err.h). */
#include "core/err.h"

#include <stdarg.h>

#define IFL_VERSION_STRING "0.1.0"

const char *ifl_version(void)
{
    return IFL_VERSION_STRING;
}

const char *ifl_strerror(int status)
{
    switch (status) {
    case IFL_OK:
        return "success";
    case IFL_EINVAL:
        return "invalid argument";
    case IFL_ENOMEM:
        return "out of memory";
    case IFL_EFORMAT:
        return "malformed input";
    case IFL_EIO:
        return "input/output error";
    case IFL_EFULL:
        return "full";
    case IFL_ECANCELLED:
        return "cancelled";
    case IFL_ETIMEDOUT:
        return "timed out";
    case IFL_EUNSUPPORTED:
        return "not supported";
    case IFL_ENOTFOUND:
        return "not found";
    case IFL_ESTATE:
        return "wrong state";
    default:
        return "unknown status";
    }
}

int ifl_err(char *err, int status, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, IFL_ERR_LEN, fmt, ap);
        va_end(ap);
    }
    return status;
}
