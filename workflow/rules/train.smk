# placeholder: training rules
