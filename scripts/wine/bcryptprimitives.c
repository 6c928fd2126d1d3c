#include <windows.h>
typedef BOOLEAN (WINAPI *RtlGenRandomFn)(PVOID, ULONG);
__declspec(dllexport) BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len) {
    static RtlGenRandomFn fn = NULL;
    if (!fn) {
        HMODULE h = LoadLibraryA("advapi32.dll");
        fn = (RtlGenRandomFn)GetProcAddress(h, "SystemFunction036");
    }
    while (len > 0) {
        ULONG n = len > 0x40000000 ? 0x40000000 : (ULONG)len;
        if (!fn(data, n)) return FALSE;
        data += n; len -= n;
    }
    return TRUE;
}
