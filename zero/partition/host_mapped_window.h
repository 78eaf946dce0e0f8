// The host MappedWindow (engine/mapped_window.h): the slots are one memfd, mapped once
// (MAP_SHARED, every page touched at creation) where the all-gathers write them; every unit has
// a PROT_NONE reservation of its segment's bytes rounded up to pages, made at finalize. A fetch
// maps the slot's range of the memfd over the unit's reservation (MAP_FIXED | MAP_SHARED, page
// tables populated at once), a release puts a PROT_NONE reservation back over it (MAP_FIXED, so
// the address range is never free for another mapping), and a read of a released unit is a
// SIGSEGV. The same pages are mapped twice while a unit is fetched: the gather's writes through
// the slot address are the unit's data at its own address.
#pragma once

#include <memory>

#include "lib/core/status.h"
#include "engine/mapped_window.h"

namespace zrt {

// Errors: ZRT_INVALID_ARGUMENT (no slots), ZRT_OUT_OF_MEMORY / ZRT_SYSTEM_ERROR (memfd, mmap:
// the call and errno are named).
Status create_host_mapped_window(const MappedWindowSpec& spec,
                                 std::unique_ptr<MappedWindow>* window);

}  // namespace zrt
