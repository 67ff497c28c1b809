/* placeholder: being written */
typedef int cf_placeholder_t;
