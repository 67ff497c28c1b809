/* elfload.c - link a cached kernel object without LLVM (codegen/ in
 * libcollfuse; codegen.h, "elfload.c").
 *
 * The kernel cache's objects (objcache.c) are ELF64 x86-64 relocatable
 * files that LLVM emitted for one kernel: code and constants (.text,
 * .rodata*), relocations only between their own sections, nothing
 * undefined. Linking such a file is copying its allocated sections into
 * one mapping, applying R_X86_64_64, PC32 and PLT32 against symbols
 * defined in those sections, and making the mapping read+execute. Anything
 * else (an undefined symbol, a writable or TLS section, another relocation
 * type, a value out of range, a malformed file) is refused with a reason,
 * never guessed: the caller then links through the LLVM module as before.
 */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#include "codegen.h"

#include <elf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define REFUSE(...)                                                                                \
  do {                                                                                             \
    snprintf(why, len, __VA_ARGS__);                                                               \
    goto fail;                                                                                     \
  } while (0)

/* whether [off, off+n) lies inside [0, size) */
static bool inside(uint64_t off, uint64_t n, size_t size) { return off <= size && n <= size - off; }

bool cf_elf_link(const void *obj, size_t size, const char *name, cf_elf_image *img, void **fn,
                 char *why, size_t len) {
  const unsigned char *f = obj;
  memset(img, 0, sizeof *img);
  *fn = NULL;
  uint64_t *addr = NULL; /* each section's offset in the mapping, UINT64_MAX: not loaded */
  const Elf64_Ehdr *eh = obj;
  const Elf64_Shdr *sh;
  if (!obj || size < sizeof *eh || memcmp(eh->e_ident, ELFMAG, SELFMAG)) REFUSE("not an ELF file");
  if (eh->e_ident[EI_CLASS] != ELFCLASS64 || eh->e_ident[EI_DATA] != ELFDATA2LSB ||
      eh->e_type != ET_REL || eh->e_machine != EM_X86_64)
    REFUSE("not an ELF64 little-endian x86-64 relocatable object");
  if (eh->e_shentsize != sizeof(Elf64_Shdr) || eh->e_shnum == 0 || eh->e_shnum >= SHN_LORESERVE ||
      !inside(eh->e_shoff, (uint64_t)eh->e_shnum * sizeof(Elf64_Shdr), size) || eh->e_shoff % 8)
    REFUSE("bad section header table");
  sh = (const Elf64_Shdr *)(f + eh->e_shoff);
  int n = eh->e_shnum;
  addr = malloc(sizeof *addr * (size_t)n);
  if (!addr) REFUSE("out of memory");
  uint64_t total = 0;
  for (int i = 0; i < n; i++) {
    addr[i] = UINT64_MAX;
    if (!(sh[i].sh_flags & SHF_ALLOC)) continue;
    if (sh[i].sh_flags & (SHF_WRITE | SHF_TLS)) REFUSE("section %d is writable or TLS", i);
    if (sh[i].sh_type != SHT_PROGBITS) REFUSE("section %d of type %u", i, sh[i].sh_type);
    uint64_t al = sh[i].sh_addralign ? sh[i].sh_addralign : 1;
    if (al & (al - 1) || al > 4096 || !inside(sh[i].sh_offset, sh[i].sh_size, size))
      REFUSE("section %d out of bounds", i);
    total = (total + al - 1) & ~(al - 1);
    addr[i] = total;
    total += sh[i].sh_size;
  }
  if (total == 0 || total > ((uint64_t)1 << 30)) REFUSE("no code");
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  img->len = ((size_t)total + page - 1) & ~(page - 1);
  void *m = mmap(NULL, img->len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) {
    img->len = 0;
    REFUSE("cannot map %zu bytes", (size_t)total);
  }
  img->base = m;
  unsigned char *base = m;
  for (int i = 0; i < n; i++)
    if (addr[i] != UINT64_MAX) memcpy(base + addr[i], f + sh[i].sh_offset, sh[i].sh_size);

  /* the symbol table (one, as LLVM writes) */
  const Elf64_Sym *syms = NULL;
  const char *strs = NULL;
  uint64_t nsyms = 0, strsize = 0;
  unsigned symidx = 0;
  for (int i = 0; i < n; i++) {
    if (sh[i].sh_type != SHT_SYMTAB) continue;
    if (syms || sh[i].sh_entsize != sizeof(Elf64_Sym) ||
        !inside(sh[i].sh_offset, sh[i].sh_size, size) || sh[i].sh_offset % 8 ||
        sh[i].sh_link >= (unsigned)n || sh[sh[i].sh_link].sh_type != SHT_STRTAB ||
        !inside(sh[sh[i].sh_link].sh_offset, sh[sh[i].sh_link].sh_size, size) ||
        sh[sh[i].sh_link].sh_size == 0)
      REFUSE("bad symbol table");
    syms = (const Elf64_Sym *)(f + sh[i].sh_offset);
    symidx = (unsigned)i;
    nsyms = sh[i].sh_size / sizeof(Elf64_Sym);
    strs = (const char *)(f + sh[sh[i].sh_link].sh_offset);
    strsize = sh[sh[i].sh_link].sh_size;
    if (strs[strsize - 1] != '\0') REFUSE("bad string table");
  }
  if (!syms) REFUSE("no symbol table");

  for (int i = 0; i < n; i++) {
    if (sh[i].sh_type == SHT_REL) REFUSE("REL relocations");
    if (sh[i].sh_type != SHT_RELA) continue;
    if (sh[i].sh_info >= (unsigned)n) REFUSE("bad relocation section %d", i);
    int to = (int)sh[i].sh_info;
    if (addr[to] == UINT64_MAX) continue; /* relocates what is not loaded (debug info) */
    if (sh[i].sh_entsize != sizeof(Elf64_Rela) || !inside(sh[i].sh_offset, sh[i].sh_size, size) ||
        sh[i].sh_offset % 8 || sh[i].sh_link != symidx)
      REFUSE("bad relocation section %d", i);
    const Elf64_Rela *r = (const Elf64_Rela *)(f + sh[i].sh_offset);
    uint64_t nr = sh[i].sh_size / sizeof *r;
    for (uint64_t k = 0; k < nr; k++) {
      uint32_t type = ELF64_R_TYPE(r[k].r_info);
      uint64_t si = ELF64_R_SYM(r[k].r_info);
      if (si == 0 || si >= nsyms) REFUSE("relocation against no symbol");
      const Elf64_Sym *s = &syms[si];
      if (s->st_shndx == SHN_UNDEF || s->st_shndx >= (unsigned)n || addr[s->st_shndx] == UINT64_MAX)
        REFUSE("relocation against a symbol outside the object's code (%s)",
               s->st_name < strsize ? strs + s->st_name : "?");
      if (s->st_value > sh[s->st_shndx].sh_size) REFUSE("symbol out of its section");
      uint64_t S = (uint64_t)(uintptr_t)base + addr[s->st_shndx] + s->st_value;
      uint64_t A = (uint64_t)r[k].r_addend;
      unsigned width = type == R_X86_64_64 ? 8 : 4;
      if (!inside(r[k].r_offset, width, sh[to].sh_size)) REFUSE("relocation out of its section");
      unsigned char *P = base + addr[to] + r[k].r_offset;
      if (type == R_X86_64_64) {
        uint64_t v = S + A;
        memcpy(P, &v, 8);
      } else if (type == R_X86_64_PC32 || type == R_X86_64_PLT32) {
        int64_t v = (int64_t)(S + A - (uint64_t)(uintptr_t)P);
        if (v < INT32_MIN || v > INT32_MAX) REFUSE("PC32 relocation out of range");
        int32_t v32 = (int32_t)v;
        memcpy(P, &v32, 4);
      } else {
        REFUSE("relocation type %u", type);
      }
    }
  }

  for (uint64_t k = 1; k < nsyms && !*fn; k++) {
    const Elf64_Sym *s = &syms[k];
    if (ELF64_ST_TYPE(s->st_info) == STT_FUNC && ELF64_ST_BIND(s->st_info) == STB_GLOBAL &&
        s->st_name < strsize && !strcmp(strs + s->st_name, name) && s->st_shndx < (unsigned)n &&
        s->st_shndx != SHN_UNDEF && addr[s->st_shndx] != UINT64_MAX &&
        s->st_value < sh[s->st_shndx].sh_size)
      *fn = base + addr[s->st_shndx] + s->st_value;
  }
  if (!*fn) REFUSE("no function %s", name);
  if (mprotect(base, img->len, PROT_READ | PROT_EXEC) != 0)
    REFUSE("cannot make the code executable");
  free(addr);
  return true;
fail:
  free(addr);
  cf_elf_unmap(img);
  *fn = NULL;
  return false;
}

void cf_elf_unmap(cf_elf_image *img) {
  if (img->base) munmap(img->base, img->len);
  img->base = NULL;
  img->len = 0;
}
