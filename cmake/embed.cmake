# embed.cmake - turn a file into a C array: cmake -DIN=x -DOUT=y.c -DSYM=name -P embed.cmake
file(READ "${IN}" hex HEX)
string(LENGTH "${hex}" n)
math(EXPR bytes "${n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," body "${hex}")
file(WRITE "${OUT}" "/* generated from ${IN}; do not edit */\n#include <stddef.h>\nconst unsigned char ${SYM}[] = {${body}0x00};\nconst size_t ${SYM}_len = ${bytes};\n")
